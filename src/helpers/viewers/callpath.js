// The compile call-path viewer (helpers.viewers.CallPathViewer): a slider over recorded steps of
// a torch.compile call; each step's picture of the compile stages (SVG text), name, permalink
// and source text come from Python in the `steps` trait, so this module only shows them. It runs
// in JupyterLab and in the static book (the widgets HTML manager) alike.

function render({ model, el }) {
  const steps = model.get("steps");
  const root = document.createElement("div");
  root.className = "callpath-step-view";

  const { bar, range, readout } = stepBar({
    model, prefix: "callpath", aria: "call path step", count: steps.length,
  }); // slider.js

  const body = document.createElement("div");
  body.className = "callpath-step";
  const picture = document.createElement("div");
  picture.style.overflowX = "auto";
  const title = document.createElement("div");
  const code = document.createElement("code");
  const strong = document.createElement("b");
  strong.className = "callpath-step-name";
  strong.append(code);
  const link = document.createElement("a");
  link.target = "_blank";
  link.rel = "noopener";
  link.textContent = "permalink";
  title.append(strong, " ", link);
  const text = document.createElement("pre");
  text.className = "callpath-step-text";
  const source = document.createElement("pre");
  source.className = "callpath-step-source";
  body.append(picture, title, text, source);
  root.append(bar, body);
  el.append(root);

  function show() {
    const i = model.get("step");
    const shown = steps[i];
    range.value = String(i);
    readout.textContent = `${i + 1} of ${steps.length}`;
    body.dataset.step = String(shown.index);
    picture.innerHTML = shown.svg; // our own SVG text (helpers.pictures.compile_stages_svg)
    code.textContent = shown.name;
    link.hidden = !shown.url;
    link.href = shown.url || "";
    text.textContent = shown.head;
    source.textContent = shown.body;
  }
  return driveSlider({ model, root, range, count: steps.length, show }); // slider.js
}

export default { render };
