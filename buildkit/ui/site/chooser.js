// buildkit report --html: the chooser. Every decision was made when the site was generated (the routing of
// `buildkit run --print`); this only looks the answer up and shows it, writing text nodes, never markup.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("chooser-data").textContent);
  var form = document.getElementById("chooser");
  var answer = document.getElementById("answer");
  var gpu = form.elements.gpu, torch = form.elements.torch, python = form.elements.python;
  form.hidden = false;

  function el(tag, text, className) {
    var node = document.createElement(tag);
    if (text) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function copyable(label, text) {
    var box = el("div", "", "line");
    var pre = el("pre"), button = el("button", "Copy");
    pre.appendChild(el("code", text));
    button.type = "button";
    button.setAttribute("aria-label", "Copy the " + label + " line");
    button.addEventListener("click", function () {
      var done = function () { button.textContent = "Copied"; };
      var select = function () {
        var range = document.createRange();
        range.selectNodeContents(pre);
        var selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        button.textContent = "Selected";
      };
      if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, select);
      else select();
    });
    box.appendChild(pre);
    box.appendChild(button);
    return [el("h3", label), box];
  }

  function size(bytes) {  // as the pages write sizes (ui.views.human_size)
    var units = ["B", "KiB", "MiB", "GiB"], value = bytes, unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return unit ? value.toFixed(1) + " " + units[unit] : value + " B";
  }

  function finding(pair, className) {
    var p = el("p", "", className);
    p.appendChild(el("span", data.texts[pair[0]]));
    p.appendChild(document.createTextNode(". Fix: " + data.texts[pair[1]]));
    return p;
  }

  function image(index) {  // an image of the data: a list of its fields (core/site/chooser.py IMAGE_FIELDS)
    var found = {}, fields = data.images[index];
    data.fields.forEach(function (name, at) { found[name] = fields[at]; });
    found.ref = typeof found.ref === "number" ? data.refs[found.ref] + found.id : data.refs[found.ref[0]] + found.ref[1];
    found.href = data.pages[found.page] + "#" + found.id;
    return found;
  }

  function filled(text, image) {  // the data names the chosen image and its twin by placeholders
    return text.split("{image}").join(image.id).split("{twin}").join(image.twin);
  }

  function pythons() {
    var wanted = python.value, versions = data.pythons[torch.value] || [];
    while (python.firstChild) python.removeChild(python.firstChild);
    versions.forEach(function (version) { python.appendChild(el("option", version)); });
    if (versions.indexOf(wanted) >= 0) python.value = wanted;
  }

  function show() {
    while (answer.firstChild) answer.removeChild(answer.firstChild);
    if (!gpu.value) {
      answer.appendChild(el("p", "Choose your GPU to see the image that uses it.", "fine"));
      return;
    }
    var row = data.rows[data.decisions[gpu.value]] || [];
    var decision = row[data.combos.indexOf(torch.value + "|" + python.value)];
    if (!decision) {
      answer.appendChild(el("p", "The matrix has no image of torch " + torch.value + " for Python " + python.value + ".", "miss"));
      return;
    }
    var notes = decision[1];
    if (decision[0] < 0) {
      answer.setAttribute("data-image", "");
      answer.appendChild(el("p", "No image of torch " + torch.value + " for Python " + python.value + " uses this GPU.", "pick"));
      notes.forEach(function (pair) { answer.appendChild(finding(pair, "miss")); });
      return;
    }
    var chosen = image(decision[0]), lines = data.lines[chosen.vendor];
    answer.setAttribute("data-image", chosen.id);
    var pick = el("p", "", "pick");
    var link = el("a", chosen.id);
    link.href = chosen.href;
    pick.appendChild(link);
    pick.appendChild(document.createTextNode(" (" + chosen.backend + ")"));
    answer.appendChild(pick);
    if (chosen.smoke) {
      var facts = el("p", "", "facts-line");
      facts.appendChild(document.createTextNode("smoke test "));
      facts.appendChild(el("span", chosen.smoke[1], "b " + chosen.smoke[0]));
      facts.appendChild(document.createTextNode(" GPU test "));
      facts.appendChild(el("span", chosen.gpu[1], "b " + chosen.gpu[0]));
      if (chosen.size) facts.appendChild(document.createTextNode(" size " + size(chosen.size)));
      answer.appendChild(facts);
    }
    notes.forEach(function (pair) { answer.appendChild(finding(pair, "miss")); });
    [].concat(copyable("docker", lines.docker + " " + chosen.ref),
              copyable("podman", lines.podman + " " + chosen.ref),
              copyable("Kubernetes", "image: " + chosen.ref + "\nresources:\n  limits:\n    " + lines.resource + ": 1"))
      .forEach(function (node) { answer.appendChild(node); });
    var more = el("p", "", "fine");
    more.appendChild(document.createTextNode("Its GPU test, layers, packages and Kubernetes node affinity, beside its twins: "));
    var page = el("a", "its row of the matrix");
    page.href = chosen.href;
    more.appendChild(page);
    answer.appendChild(more);
    if (chosen.cpu) {
      var cpu = el("p", "", "cpu");
      cpu.appendChild(el("strong", "Not its " + (chosen.vendor === "nvidia" ? "ROCm" : "CUDA") + " twin: "));
      cpu.appendChild(document.createTextNode(filled(data.texts[chosen.cpu[0]], chosen) + "."));
      answer.appendChild(cpu);
    }
  }

  torch.addEventListener("change", function () { pythons(); show(); });
  gpu.addEventListener("change", show);
  python.addEventListener("change", show);
  pythons();
  show();
}());
