// Where the book's widget modules are (tools/book.py stages this file as _static/widgets/config.js,
// next to them): RequireJS finds anywidget's front end here, so the Jupyter widgets HTML manager
// (embed-amd.js, loaded after this file) never falls back to its CDN.
(function () {
  var here = document.currentScript.src.replace(/[^/]*$/, "");
  window.require.config({ paths: { anywidget: here + "anywidget" } });
})();
