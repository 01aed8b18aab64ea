// The ring attention viewer (helpers.viewers.RingAttentionViewer): a slider over the steps of
// ring attention's schedule; each step's picture (helpers.context_parallel.ring_attention_svg)
// and text come from Python in the `steps` trait, so this module only shows them (slider.js's
// renderPictureAndText). It runs in JupyterLab and in the static book (the widgets HTML
// manager) alike.

function render({ model, el }) {
  return renderPictureAndText({
    model, el, prefix: "ringattn", aria: "ring attention step", say: (i) => `s = ${i}`,
  });
}

export default { render };
