// The ring all-reduce viewer (helpers.viewers.RingViewer): a slider over the recorded steps; each
// step's picture (helpers.pictures.ring_svg) and text come from Python in the `steps` trait, so
// this module only shows them (slider.js's renderPictureAndText). It runs in JupyterLab and in
// the static book (the widgets HTML manager) alike.

function render({ model, el }) {
  return renderPictureAndText({
    model, el, prefix: "ring", aria: "ring all-reduce step", say: (i) => String(i),
  });
}

export default { render };
