// The ring attention viewer (helpers.viewers.RingAttentionViewer): a slider over the steps of
// ring attention's schedule; each step's picture (SVG text) and text come from Python in the
// `steps` trait, so this module only shows them. It runs in JupyterLab and in the static book
// (the widgets HTML manager) alike.

function render({ model, el }) {
  const steps = model.get("steps");
  const root = document.createElement("div");
  root.className = "ringattn-step-view";

  const bar = document.createElement("label");
  bar.className = "ringattn-step-slider";
  bar.style.cssText = "display:flex;align-items:center;gap:0.6em;margin-bottom:0.4em";
  const name = document.createElement("span");
  name.textContent = model.get("label");
  const range = document.createElement("input");
  range.type = "range";
  range.min = "0";
  range.max = String(steps.length - 1);
  range.step = "1";
  range.setAttribute("aria-label", "ring attention step");
  const readout = document.createElement("span");
  readout.className = "ringattn-step-readout";
  bar.append(name, range, readout);

  const body = document.createElement("div");
  body.className = "ringattn-step";
  body.style.cssText = "display:flex;gap:1em;align-items:flex-start;flex-wrap:wrap";
  const picture = document.createElement("div");
  const text = document.createElement("pre");
  text.className = "ringattn-step-text";
  text.style.margin = "0";
  body.append(picture, text);
  root.append(bar, body);
  el.append(root);

  function show() {
    const i = model.get("step");
    const shown = steps[i];
    range.value = String(i);
    readout.textContent = `s = ${i}`;
    body.dataset.step = String(i);
    picture.innerHTML = shown.svg; // our own SVG (helpers.context_parallel.ring_attention_svg)
    text.textContent = shown.text;
  }
  return driveSlider({ model, root, range, count: steps.length, show }); // slider.js
}

export default { render };
