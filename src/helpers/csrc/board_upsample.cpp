// board::upsample: the upsampling rule of an imagined deployment board, as a PyTorch C++ op.
//
// The board maps output pixel d to input coordinate d * (in - 1) / (out - 1) ("align corners"),
// and then
//   nearest:  takes input pixel floor(coordinate + 0.5)            (round half up)
//   bilinear: blends the two neighbouring input pixels linearly
// PyTorch's defaults differ: F.interpolate(mode="nearest") takes floor(d * in / out), and
// mode="bilinear" uses half-pixel centres unless align_corners=True.
// Used by helpers.board_op (notebook 12), built by torch.utils.cpp_extension.load_inline.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

// One output index along an axis reads input indices i0 and i1 with weights 1 - w1 and w1.
struct Tap {
  int64_t i0;
  int64_t i1;
  double w1;
};

std::vector<Tap> taps(int64_t in, int64_t out, bool bilinear) {
  std::vector<Tap> result(out);
  const double step = out > 1 ? double(in - 1) / double(out - 1) : 0.0;  // align corners
  for (int64_t d = 0; d < out; ++d) {
    const double pos = d * step;
    if (bilinear) {
      const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(pos)), in - 1);
      result[d] = {i0, std::min<int64_t>(i0 + 1, in - 1), pos - double(i0)};
    } else {
      const int64_t i = std::min<int64_t>(static_cast<int64_t>(std::floor(pos + 0.5)), in - 1);
      result[d] = {i, i, 0.0};
    }
  }
  return result;
}

bool is_bilinear(c10::string_view mode) {
  TORCH_CHECK(mode == "nearest" || mode == "bilinear",
              "board::upsample: mode must be 'nearest' or 'bilinear', got '", mode, "'");
  return mode == "bilinear";
}

void check_4d_float(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.dim() == 4, "board::upsample: expected ", what, " of shape (N, C, H, W), got ",
              t.dim(), "-D shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
              "board::upsample: expected ", what, " of dtype float32 or float64, got ",
              t.scalar_type());
  TORCH_CHECK(t.device().is_cpu(), "board::upsample: this kernel runs on CPU, got ", what,
              " on ", t.device());
}

void check_scale(int64_t scale) {
  TORCH_CHECK(scale >= 1 && scale <= 16,
              "board::upsample: scale must be an integer from 1 to 16, got ", scale);
}

at::Tensor upsample_cpu(const at::Tensor& input, int64_t scale, c10::string_view mode) {
  check_4d_float(input, "input");
  check_scale(scale);
  const bool bilinear = is_bilinear(mode);
  const at::Tensor x = input.contiguous();
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = H * scale, OW = W * scale;
  at::Tensor out = at::empty({x.size(0), x.size(1), OH, OW}, x.options());
  const std::vector<Tap> th = taps(H, OH, bilinear), tw = taps(W, OW, bilinear);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "board_upsample", [&] {
    const scalar_t* src = x.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    for (int64_t p = 0; p < planes; ++p) {
      const scalar_t* s = src + p * H * W;
      scalar_t* o = dst + p * OH * OW;
      for (int64_t y = 0; y < OH; ++y) {
        const Tap& a = th[y];
        for (int64_t xo = 0; xo < OW; ++xo) {
          const Tap& b = tw[xo];
          const double top = s[a.i0 * W + b.i0] * (1 - b.w1) + s[a.i0 * W + b.i1] * b.w1;
          const double bottom = s[a.i1 * W + b.i0] * (1 - b.w1) + s[a.i1 * W + b.i1] * b.w1;
          o[y * OW + xo] = static_cast<scalar_t>(top * (1 - a.w1) + bottom * a.w1);
        }
      }
    }
  });
  return out;
}

// The gradient: every output pixel hands its gradient back to the taps it read, by weight.
at::Tensor upsample_backward_cpu(const at::Tensor& grad_output, int64_t in_h, int64_t in_w,
                                 int64_t scale, c10::string_view mode) {
  check_4d_float(grad_output, "grad_output");
  check_scale(scale);
  const bool bilinear = is_bilinear(mode);
  TORCH_CHECK(grad_output.size(2) == in_h * scale && grad_output.size(3) == in_w * scale,
              "board::upsample_backward: grad_output shape ", grad_output.sizes(),
              " does not match input size (", in_h, ", ", in_w, ") times scale ", scale);
  const at::Tensor g = grad_output.contiguous();
  const int64_t planes = g.size(0) * g.size(1), OH = g.size(2), OW = g.size(3);
  at::Tensor grad_input = at::zeros({g.size(0), g.size(1), in_h, in_w}, g.options());
  const std::vector<Tap> th = taps(in_h, OH, bilinear), tw = taps(in_w, OW, bilinear);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "board_upsample_backward", [&] {
    const scalar_t* go = g.data_ptr<scalar_t>();
    scalar_t* gi = grad_input.data_ptr<scalar_t>();
    for (int64_t p = 0; p < planes; ++p) {
      const scalar_t* o = go + p * OH * OW;
      scalar_t* i = gi + p * in_h * in_w;
      for (int64_t y = 0; y < OH; ++y) {
        const Tap& a = th[y];
        for (int64_t xo = 0; xo < OW; ++xo) {
          const Tap& b = tw[xo];
          const double v = o[y * OW + xo];
          i[a.i0 * in_w + b.i0] += static_cast<scalar_t>(v * (1 - a.w1) * (1 - b.w1));
          i[a.i0 * in_w + b.i1] += static_cast<scalar_t>(v * (1 - a.w1) * b.w1);
          i[a.i1 * in_w + b.i0] += static_cast<scalar_t>(v * a.w1 * (1 - b.w1));
          i[a.i1 * in_w + b.i1] += static_cast<scalar_t>(v * a.w1 * b.w1);
        }
      }
    }
  });
  return grad_input;
}

}  // namespace

// The schema is what the dispatcher, torch.compile, torch.export and the ONNX exporter see.
TORCH_LIBRARY(board, m) {
  m.def("upsample(Tensor input, int scale, str mode) -> Tensor");
  m.def("upsample_backward(Tensor grad_output, int in_h, int in_w, int scale, str mode) -> Tensor");
}

// The CPU kernels: registered under the CPU dispatch key, nothing else.
TORCH_LIBRARY_IMPL(board, CPU, m) {
  m.impl("upsample", &upsample_cpu);
  m.impl("upsample_backward", &upsample_backward_cpu);
}
