// The slider plumbing every step viewer shares (helpers.viewers prepends this file to each
// viewer's module): moving the range or pressing a key sets the model's `step`; a change of
// `step` redraws through the viewer's `show`.
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
