// The all-to-all viewer (helpers.viewers.AllToAllViewer): a slider over the recorded exchanges
// of an expert-parallel step; each step's picture (helpers.expert_parallel.exchange_svg) and text
// come from Python in the `steps` trait, so this module only shows them (slider.js's
// renderPictureAndText). It runs in JupyterLab and in the static book (the widgets HTML
// manager) alike.

function render({ model, el }) {
  return renderPictureAndText({
    model, el, prefix: "alltoall", aria: "all-to-all step", say: (i, n) => `${i + 1} of ${n}`,
  });
}

export default { render };
