// What every step viewer shares (helpers.viewers prepends this file to each viewer's module):
// the slider bar (`stepBar`), the plumbing by which moving the range or pressing a key sets the
// model's `step` and a change of `step` redraws through the viewer's `show` (`driveSlider`), and
// the whole view of the viewers whose steps are each a picture and a text
// (`renderPictureAndText`: ring.js, ringattn.js, alltoall.js). The class names, prefixed by the
// viewer's name, are the hooks the browser checks read (tests/viewer_checks.py).

// The bar above every viewer: its label, the range and the readout.
function stepBar({ model, prefix, aria, count }) {
  const bar = document.createElement("label");
  bar.className = `${prefix}-step-slider`;
  bar.style.cssText = "display:flex;align-items:center;gap:0.6em;margin-bottom:0.4em";
  const name = document.createElement("span");
  name.textContent = model.get("label");
  const range = document.createElement("input");
  range.type = "range";
  range.min = "0";
  range.max = String(count - 1);
  range.step = "1";
  range.setAttribute("aria-label", aria);
  const readout = document.createElement("span");
  readout.className = `${prefix}-step-readout`;
  bar.append(name, range, readout);
  return { bar, range, readout };
}

function driveSlider({ model, root, range, count, show }) {
  function go(i) {
    const step = Math.max(0, Math.min(count - 1, i));
    if (step === model.get("step")) return;
    model.set("step", step);
    model.save_changes(); // the kernel hears the step (nothing to hear in the static book)
  }
  range.addEventListener("input", () => go(Number(range.value)));
  // the keys, handled here: JupyterLab's shortcuts would otherwise take the arrow keys
  const keys = { ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1 };
  range.addEventListener("keydown", (event) => {
    const i = model.get("step");
    const to = event.key in keys ? i + keys[event.key]
      : event.key === "Home" ? 0 : event.key === "End" ? count - 1 : null;
    if (to === null) return;
    event.preventDefault();
    event.stopPropagation();
    go(to);
  });
  root.dataset.lmSuppressShortcuts = "true"; // Lumino: no shortcuts from inside the viewer
  model.on("change:step", show);
  show();
  return () => model.off("change:step", show);
}

// A viewer whose step i is `steps[i].svg` (our own SVG text, drawn in Python) beside
// `steps[i].text`; `say(i, count)` is the readout's text.
function renderPictureAndText({ model, el, prefix, aria, say }) {
  const steps = model.get("steps");
  const root = document.createElement("div");
  root.className = `${prefix}-step-view`;
  const { bar, range, readout } = stepBar({ model, prefix, aria, count: steps.length });
  const body = document.createElement("div");
  body.className = `${prefix}-step`;
  body.style.cssText = "display:flex;gap:1em;align-items:flex-start;flex-wrap:wrap";
  const picture = document.createElement("div");
  const text = document.createElement("pre");
  text.className = `${prefix}-step-text`;
  text.style.margin = "0";
  body.append(picture, text);
  root.append(bar, body);
  el.append(root);

  function show() {
    const i = model.get("step");
    range.value = String(i);
    readout.textContent = say(i, steps.length);
    body.dataset.step = String(i);
    picture.innerHTML = steps[i].svg;
    text.textContent = steps[i].text;
  }
  return driveSlider({ model, root, range, count: steps.length, show });
}
