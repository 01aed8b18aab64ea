// Predict, then see (helpers.viewers.predict.Prediction): a question, an input (a number, or one
// radio button per choice) and a commit button. Only after the commit does the module put the
// answer into the page, with how far off the prediction was (the difference, and as a percent
// or a ratio of the answer; right or wrong for a choice) and the explanation. Every word comes
// from Python, in English and in Chinese (`texts`): a live kernel says which (`lang`), in the
// static book the page's own language does. It runs in JupyterLab and in the book alike (the
// widgets HTML manager, from the embedded state). The class names are the browser test's hooks.

// "{name}" fields of a template, filled from `values`
function fill(template, values) {
  return template.replace(/\{(\w+)\}/g, (m, k) => (k in values ? String(values[k]) : m));
}

// `text` into `el`, its `code spans` as <code> (text nodes only: nothing is parsed as HTML)
function setText(el, text) {
  el.replaceChildren();
  String(text).split("`").forEach((part, i) => {
    if (i % 2 === 0) { el.append(part); return; }
    const code = document.createElement("code");
    code.textContent = part;
    el.append(code);
  });
}

// a number as the reader reads it: whole numbers as they are, others to 4 significant digits
function fmt(x) {
  return Number.isInteger(x) ? String(x) : String(Number(x.toPrecision(4)));
}

// what the reader typed as a number; NaN when it is none. "11,592", "11 592", "11_592": commas
// between groups of three digits are thousands; any other single comma is a decimal comma
// ("0,27"); "3/11" is a fraction; "1.2e4" as JavaScript reads it
function parse(text) {
  let raw = String(text).trim().replace(/[_\s]/g, "");
  if (raw === "") return NaN;
  const fraction = raw.match(/^([^/]+)\/([^/]+)$/);
  if (fraction) return parse(fraction[1]) / parse(fraction[2]);
  if (/^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$/.test(raw)) raw = raw.replace(/,/g, "");
  else if (/^[^,.]*,[^,.]*$/.test(raw)) raw = raw.replace(",", ".");
  return /,/.test(raw) ? NaN : Number(raw);
}

// how far `p` is from `a`: the difference, and a percent (within a factor of 2) or a ratio; the
// answer typed as the widget shows it (4 significant digits: 0.2727 for 3/11) is exactly right
function offBy(p, a, unit, labels) {
  if (p === a || fmt(p) === fmt(a)) return labels.exact;
  const error = fmt(Math.abs(p - a)) + (unit ? ` ${unit}` : "");
  if (a === 0 || p / a <= 0) return fill(labels.off, { error });
  const ratio = p / a;
  if (ratio >= 2 || ratio <= 0.5) return fill(labels.times, { error, ratio: fmt(ratio) });
  const percent = fmt(Number((Math.abs(p - a) / Math.abs(a) * 100).toPrecision(2)));
  return fill(p > a ? labels.high : labels.low, { error, percent });
}

let radioGroups = 0;

function render({ model, el }) {
  const lang = model.get("lang")
    || (/^zh/i.test(document.documentElement.lang || "") ? "zh" : "en");
  const texts = model.get("texts");
  const t = texts[lang] || texts.en;
  const labels = t.labels;
  const unit = t.unit ?? (model.get("unit") || ""); // the unit in the page's language
  const choices = model.get("choices") || [];

  const root = document.createElement("div");
  root.className = "predict-view";
  root.style.cssText = "border-left:3px solid #888;padding:0.4em 0.8em;margin:0.4em 0";
  root.dataset.lmSuppressShortcuts = "true"; // Lumino: the keys typed here are the reader's
  const heading = document.createElement("b");
  heading.className = "predict-heading";
  heading.textContent = labels.heading;
  const question = document.createElement("p");
  question.className = "predict-question";
  question.style.margin = "0.3em 0";
  setText(question, t.question);

  const form = document.createElement("div");
  form.className = "predict-form";
  form.style.cssText = "display:flex;gap:0.6em;align-items:center;flex-wrap:wrap";
  let input = null;
  const radios = [];
  if (choices.length) {
    const group = `predict-choice-${++radioGroups}`; // one radio group per view
    t.choices.forEach((text, i) => {
      const label = document.createElement("label");
      label.className = "predict-choice";
      const radio = document.createElement("input");
      radio.type = "radio";
      radio.name = group;
      radio.value = String(i);
      const words = document.createElement("span");
      setText(words, text);
      label.append(radio, " ", words);
      radios.push(radio);
      form.append(label);
    });
  } else {
    input = document.createElement("input");
    input.type = "text";
    input.inputMode = "decimal";
    input.className = "predict-input";
    input.placeholder = labels.input;
    input.setAttribute("aria-label", labels.input);
    form.append(input);
    if (unit) {
      const u = document.createElement("span");
      u.className = "predict-unit";
      u.textContent = unit;
      form.append(u);
    }
  }
  const commit = document.createElement("button");
  commit.type = "button";
  commit.className = "predict-commit";
  commit.textContent = labels.commit;
  form.append(commit);
  const message = document.createElement("div");
  message.className = "predict-message";
  root.append(heading, question, form, message);
  el.append(root);

  // the answer enters the page here, and only here: after a commit
  function reveal(prediction) {
    message.textContent = "";
    if (input) input.disabled = true;
    radios.forEach((r) => { r.disabled = true; r.checked = r.value === String(prediction); });
    commit.disabled = true;
    const answer = model.get("answer");
    const result = document.createElement("div");
    result.className = "predict-result";
    const line = (cls, text) => {
      const p = document.createElement("p");
      p.className = cls;
      p.style.margin = "0.3em 0";
      setText(p, text);
      result.append(p);
    };
    const said = choices.length ? t.choices[prediction] : fmt(prediction) + (unit ? ` ${unit}` : "");
    const shown = choices.length ? t.choices[answer] : fmt(answer) + (unit ? ` ${unit}` : "");
    line("predict-you", fill(labels.you, { prediction: said }));
    line("predict-answer", fill(labels.answer, { answer: shown }));
    line("predict-error", choices.length
      ? (prediction === answer ? labels.right : labels.wrong)
      : offBy(prediction, answer, unit, labels));
    if (t.explain) line("predict-explain", t.explain);
    root.append(result);
  }

  function tryCommit() {
    let prediction;
    if (choices.length) {
      const picked = radios.find((r) => r.checked);
      if (!picked) { message.textContent = labels.need_choice; return; }
      prediction = Number(picked.value);
    } else {
      prediction = parse(input.value);
      if (!Number.isFinite(prediction)) { message.textContent = labels.need_number; return; }
    }
    model.set("prediction", prediction);
    model.save_changes(); // the kernel hears it (nothing to hear in the static book)
    reveal(prediction);
  }
  commit.addEventListener("click", tryCommit);
  if (input) {
    input.addEventListener("keydown", (event) => {
      event.stopPropagation(); // JupyterLab's shortcuts would take the keys
      if (event.key === "Enter") { event.preventDefault(); tryCommit(); }
    });
  }
  const committed = model.get("prediction");
  if (committed !== null && committed !== undefined) reveal(committed); // a live view redrawn
}

export default { render };
