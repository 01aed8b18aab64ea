// The pipeline schedule viewer (helpers.viewers.TimelineViewer): a slider over the time slots of
// a schedule's timeline. The picture (SVG text) comes once from Python in `picture`; each step,
// from the `steps` trait, says where the slot's band goes, which boxes run in the slot and what
// each rank runs, so this module only moves the band, marks the boxes and shows the text. It
// runs in JupyterLab and in the static book (the widgets HTML manager) alike.

function render({ model, el }) {
  const steps = model.get("steps");
  const root = document.createElement("div");
  root.className = "timeline-step-view";

  const { bar, range, readout } = stepBar({
    model, prefix: "timeline", aria: "pipeline time slot", count: steps.length,
  }); // slider.js

  const picture = document.createElement("div");
  picture.style.overflowX = "auto";
  picture.innerHTML = model.get("picture"); // our own SVG text (helpers.pipeline_parallel)
  const svg = picture.querySelector("svg");
  const band = svg.querySelector("rect.slot-band");
  const boxes = Array.from(svg.querySelectorAll("g.action"));
  const text = document.createElement("pre");
  text.className = "timeline-step-text";
  text.style.margin = "0.4em 0 0";
  root.append(bar, picture, text);
  el.append(root);

  function show() {
    const i = model.get("step");
    const shown = steps[i];
    range.value = String(i);
    readout.textContent = `${i + 1} of ${steps.length}`;
    svg.dataset.slot = String(shown.slot);
    band.setAttribute("x", String(shown.x));
    const active = new Set(shown.active);
    boxes.forEach((box, k) => {
      box.dataset.active = String(active.has(k));
    });
    text.textContent = shown.text;
  }
  return driveSlider({ model, root, range, count: steps.length, show }); // slider.js
}

export default { render };
