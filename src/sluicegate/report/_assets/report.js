// The script of sluicegate's report and comparison pages (sluicegate.report).
// Every string from the run arrives as JSON and goes into the page as text
// (textContent, title), never as markup.
(function () {
  "use strict";

  var PAGE = 200;        // rows added to the list at a time
  var SHORT_ID = 48;     // longer task ids are shortened in the row (whole on hover)
  // Frames of these packages are folded under the user's own frames.
  var INTERNAL = /File "[^"]*[\/\\](sluicegate|trio|outcome|_pytest|pluggy)[\/\\]/;
  var FRAME = /^[ |]*File "/;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = text; }
    return node;
  }

  function parse(id) {
    var holder = document.getElementById(id);
    return holder ? JSON.parse(holder.textContent) : null;
  }

  function shortId(text) {
    if (text.length <= SHORT_ID) { return text; }
    var half = Math.floor((SHORT_ID - 1) / 2);
    return text.slice(0, half) + "\u2026" + text.slice(text.length - half);
  }

  function number(value) {
    if (value === null || value === undefined) { return ""; }
    return String(Number(value.toPrecision(4)));
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) { return ""; }
    if (seconds < 10) { return Number(seconds.toPrecision(3)) + " s"; }
    return seconds.toLocaleString("en-US", {minimumFractionDigits: 1, maximumFractionDigits: 1}) + " s";
  }

  // A traceback with the user's frames first: the frames of sluicegate, trio
  // and the test runner are taken out (the whole traceback stays one click away).
  function traceback(text) {
    var lines = text.split("\n"), own = [], internal = 0, skipping = false, indent = 0;
    for (var i = 0; i < lines.length; i++) {
      var line = lines[i];
      if (FRAME.test(line)) {
        indent = line.match(/^[ |]*/)[0].length;
        skipping = INTERNAL.test(line);
        if (skipping) { internal++; continue; }
      } else if (skipping && line.match(/^[ |]*/)[0].length > indent && line.trim() !== "") {
        continue;
      } else {
        skipping = false;
      }
      own.push(line);
    }
    var box = el("div");
    box.appendChild(el("pre", "tb", internal ? own.join("\n") : text));
    if (internal) {
      var more = el("details", "frames");
      more.appendChild(el("summary", null, "the whole traceback, with " + internal +
        " sluicegate and trio frame" + (internal === 1 ? "" : "s")));
      more.appendChild(el("pre", null, text));
      box.appendChild(more);
    }
    return box;
  }


  // What the page calls each field of a sample, by the field's name in a
  // row, in the order they are shown: the page's data, read once.
  // Written only by report() or comparison(), as the page starts.
  var fieldNames = {};

  // The whole sample of one rollout, as a definition list. ``s`` is what
  // sluicegate.report._html.sample_of() writes, by name: fields (by name),
  // notes (by the same names), explanation, errors, started, slot; those
  // without a value are left out. ``row`` is what the row's cells show:
  // score (text), duration, attempts, status.
  function sample(s, row) {
    var fields = s.fields || {}, notes = s.notes || {}, errors = s.errors || [];
    var attempts = row.attempts, durationText = duration(row.duration);
    var box = el("div", "sample"), list = el("dl");
    function item(name, content, note) {
      list.appendChild(el("dt", null, name));
      var dd = el("dd");
      if (typeof content === "string") { dd.appendChild(el("pre", null, content)); }
      else { dd.appendChild(content); }
      if (note) { dd.appendChild(el("div", "note", note)); }
      list.appendChild(dd);
    }
    Object.keys(fieldNames).forEach(function (name) {
      if (!Object.prototype.hasOwnProperty.call(fields, name)) { return; }
      var value = fields[name];
      item(fieldNames[name], typeof value === "string" ? value : JSON.stringify(value, null, 2),
        notes[name]);
    });
    if (row.score || s.explanation) {
      var score = el("div");
      score.appendChild(el("b", "u", row.score || "no score"));
      if (s.explanation) { score.appendChild(el("pre", "explanation", s.explanation)); }
      item("score", score);
    }
    // The errors are those of the last attempts that failed: all of them for
    // an error row, all but the last for a row that passed on a retry.
    var ok = row.status === "ok";
    var first = (ok ? attempts - 1 : attempts) - errors.length + 1;
    errors.forEach(function (error, k) {
      var attempt = el("div", "attempt");
      attempt.appendChild(el("b", "u", error.message ? error.type + ": " + error.message : error.type));
      if (error.traceback) { attempt.appendChild(traceback(error.traceback)); }
      item(attempts > 1 ? "attempt " + Math.max(1, first + k) + " of " + attempts : "error",
        attempt);
    });
    var when = [];
    if (durationText) { when.push(durationText); }
    if (s.started) { when.push("started " + s.started); }
    if (attempts > 1) { when.push(attempts + " attempts"); }
    if (s.slot) { when.push("ran in " + s.slot); }
    if (when.length) { item("ran", el("span", "u", when.join(" \u00b7 "))); }
    box.appendChild(list);
    return box;
  }

  // Runs ``then`` once the whole page is read: the samples come after the
  // script, so that the first rows show while the browser still reads them.
  function whenRead(then) {
    if (document.readyState === "loading") {
      document.addEventListener("DOMContentLoaded", then);
    } else {
      then();
    }
  }

  // Blocks of samples, parsed on first use.
  function samples(prefix, chunk) {
    // Each block parsed, by its number: written here only, never dropped.
    var cache = {};
    return function (index) {
      var block = Math.floor(index / chunk);
      if (!cache[block]) { cache[block] = parse(prefix + block) || []; }
      return cache[block][index % chunk];
    };
  }

  // ---------------------------------------------------------------- the report

  function report(D) {
    var N = D.task.length;
    fieldNames = D.fields;
    var sampleOf = samples("sample-", D.chunk);
    var names = Object.keys(D.scores);
    var list = document.getElementById("rows");
    var shown = document.getElementById("shown");
    var none = document.getElementById("none");
    var earlier = document.getElementById("earlier");
    var later = document.getElementById("later");
    var search = document.getElementById("search");
    var errsearch = document.getElementById("errsearch");
    var select = document.getElementById("score-name");
    var low = document.getElementById("score-min");
    var high = document.getElementById("score-max");
    var headers = Array.prototype.slice.call(document.querySelectorAll("#rollouts [data-sort]"));
    var buttons = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));
    // The status filter and the sort: written by the filter buttons, the
    // column headers (sortBy) and open(), which clears the filters.
    var status = "all", sortKey = null, descending = false;
    // The task ids and error texts in lower case, made on the first search
    // that needs them (by filter() only); they never change.
    var taskLower = null, errorLower = null;
    // view: the row numbers the filters keep, in sorted order (filter() only).
    // Invariant: list holds the rows view[start] .. view[end - 1], in order,
    // and 0 <= start <= end <= view.length; only draw(), more() and before()
    // change list, start and end, and every change of view is followed by a draw().
    var view = [], start = 0, end = 0;
    // Every row number in the sort's order; null until order() needs it, and
    // again whenever the sort changes (sortBy(), or another score to sort by).
    var sorted = null;

    names.forEach(function (name) { select.appendChild(el("option", null, name)).value = name; });
    if (names.length < 2) { select.hidden = true; }
    if (!names.length) { low.disabled = high.disabled = true; }

    function score(i) {
      var values = D.scores[select.value];
      return values ? values[i] : null;
    }

    function key(name) {
      if (name === "score") { return score; }
      var column = D[name];
      return function (i) { return column[i]; };
    }

    function order() {
      if (sorted) { return sorted; }
      var indices = new Array(N);
      for (var i = 0; i < N; i++) { indices[i] = i; }
      if (sortKey === "task") {
        // task-9 before task-10; a task's rollouts in order.
        var compare = new Intl.Collator(undefined, {numeric: true}).compare;
        var flip = descending ? -1 : 1;
        indices.sort(function (a, b) {
          return flip * (compare(D.task[a], D.task[b]) || D.rollout[a] - D.rollout[b]) || a - b;
        });
      } else if (sortKey) {
        var of = key(sortKey), sign = descending ? -1 : 1;
        var values = indices.map(of);
        indices.sort(function (a, b) {
          var x = values[a], y = values[b];
          // Rows without a value go last, whichever the direction.
          if (x === null || x === undefined) { return (y === null || y === undefined) ? a - b : 1; }
          if (y === null || y === undefined) { return -1; }
          if (x < y) { return -sign; }
          if (x > y) { return sign; }
          return a - b;
        });
      }
      sorted = indices;
      return sorted;
    }

    function bound(input) {
      var text = input.value.trim();
      if (text === "") { return null; }
      var value = Number(text);
      return isFinite(value) ? value : null;
    }

    function filter() {
      var query = search.value.trim().toLowerCase();
      var errorQuery = errsearch.value.trim().toLowerCase();
      var lo = bound(low), hi = bound(high), ranged = lo !== null || hi !== null;
      if (query && !taskLower) { taskLower = D.task.map(function (t) { return t.toLowerCase(); }); }
      if (errorQuery && !errorLower) {
        errorLower = D.error.map(function (t) { return t.toLowerCase(); });
      }
      var values = D.scores[select.value] || [];
      var indices = order(), kept = [];
      for (var n = 0; n < indices.length; n++) {
        var i = indices[n];
        if (status !== "all" && D.status[i] !== status) { continue; }
        if (query && taskLower[i].indexOf(query) === -1) { continue; }
        if (errorQuery && errorLower[i].indexOf(errorQuery) === -1) { continue; }
        if (ranged) {
          var v = values[i];
          if (v === null || v === undefined || (lo !== null && v < lo) || (hi !== null && v > hi)) {
            continue;
          }
        }
        kept.push(i);
      }
      view = kept;
      shown.textContent = view.length + " of " + N + " rollouts";
      none.hidden = view.length !== 0;
    }

    // What row ``i``'s cells show, as sample() reads it.
    function facts(i) {
      return {score: D.score[i], duration: D.duration[i], attempts: D.attempts[i],
        status: D.status[i]};
    }

    function row(i) {
      var details = el("details");
      details.setAttribute("data-i", i);
      details.setAttribute("data-status", D.status[i]);
      var line = el("summary");
      var task = D.task[i];
      var cell = el("span", "c task", shortId(task));
      cell.title = task;
      line.appendChild(cell);
      line.appendChild(el("span", "c num", String(D.rollout[i])));
      line.appendChild(el("span", "c st " + D.status[i], D.status[i]));
      line.appendChild(el("span", "c score", D.score[i]));
      line.appendChild(el("span", "c num", String(D.attempts[i])));
      line.appendChild(el("span", "c num", duration(D.duration[i])));
      var error = el("span", "c err", D.error[i]);
      if (D.error[i]) { error.title = D.error[i]; }
      line.appendChild(error);
      details.appendChild(line);
      // filled: whether the sample is drawn (once, on the first opening).
      details.addEventListener("toggle", function () {
        if (!details.open || details.filled) { return; }
        details.filled = true;
        whenRead(function () { details.appendChild(sample(sampleOf(i), facts(i))); });
      });
      return details;
    }

    function edges() {
      earlier.hidden = start === 0;
      earlier.textContent = "show " + Math.min(PAGE, start) + " earlier rows (" + start + " above)";
      later.hidden = end >= view.length;
      later.textContent = "show more rows (" + (view.length - end) + " below)";
    }

    function draw(from, to) {
      start = from;
      end = to;
      var fragment = document.createDocumentFragment();
      for (var n = from; n < to; n++) { fragment.appendChild(row(view[n])); }
      list.textContent = "";
      list.appendChild(fragment);
      edges();
    }

    function more() {
      if (end >= view.length) { return; }
      var to = Math.min(view.length, end + PAGE);
      var fragment = document.createDocumentFragment();
      for (var n = end; n < to; n++) { fragment.appendChild(row(view[n])); }
      list.appendChild(fragment);
      end = to;
      edges();
    }

    function before() {
      var from = Math.max(0, start - PAGE);
      var fragment = document.createDocumentFragment();
      for (var n = from; n < start; n++) { fragment.appendChild(row(view[n])); }
      var anchor = list.firstChild, top = anchor ? anchor.getBoundingClientRect().top : 0;
      list.insertBefore(fragment, anchor);
      if (anchor) { window.scrollBy(0, anchor.getBoundingClientRect().top - top); }
      start = from;
      edges();
    }

    function apply() {
      filter();
      draw(0, Math.min(PAGE, view.length));
    }

    function sortBy(name) {
      descending = sortKey === name ? !descending : name === "score" || name === "duration";
      sortKey = name;
      sorted = null;
      headers.forEach(function (header) {
        var mine = header.getAttribute("data-sort") === name;
        var order = mine ? (descending ? "descending" : "ascending") : "none";
        var button = header.querySelector("button");
        header.setAttribute("data-order", order);
        button.setAttribute("aria-label", button.textContent + ": " +
          (mine ? "sorted " + order + ", press to reverse" : "sort"));
      });
      apply();
    }

    // Opens row ``i`` wherever it is, clearing the filters if they hide it.
    function open(i) {
      var at = view.indexOf(i), cleared = at === -1;
      if (cleared) {
        status = "all";
        buttons.forEach(function (b) {
          b.setAttribute("aria-pressed", String(b.getAttribute("data-filter") === "all"));
        });
        search.value = errsearch.value = low.value = high.value = "";
        filter();
        at = view.indexOf(i);
      }
      // A new view: the list holds the old view's rows, whatever start and
      // end say of the new one, so it is drawn again around the row.
      if (cleared || at < start || at >= end) {
        var from = Math.max(0, at - 20);
        draw(from, Math.min(view.length, from + PAGE));
      }
      var target = list.querySelector('details[data-i="' + i + '"]');
      target.open = true;
      target.scrollIntoView({block: "center"});
      target.firstChild.focus();
    }

    buttons.forEach(function (button) {
      button.addEventListener("click", function () {
        status = button.getAttribute("data-filter");
        buttons.forEach(function (other) {
          other.setAttribute("aria-pressed", String(other === button));
        });
        apply();
      });
    });
    headers.forEach(function (header) {
      header.querySelector("button").addEventListener("click", function () {
        sortBy(header.getAttribute("data-sort"));
      });
    });
    var timer = 0;
    function soon() {
      clearTimeout(timer);
      timer = setTimeout(apply, N > 20000 ? 150 : 0);
    }
    [search, errsearch, low, high].forEach(function (input) {
      input.addEventListener("input", soon);
    });
    select.addEventListener("change", function () {
      if (sortKey === "score") { sorted = null; }
      apply();
    });
    earlier.addEventListener("click", before);
    later.addEventListener("click", more);
    if ("IntersectionObserver" in window) {
      new IntersectionObserver(function (entries) {
        if (entries[0].isIntersecting) { more(); }
      }, {rootMargin: "800px"}).observe(later);
    }

    // A run's bar in the timeline opens its row: the page names the row in
    // the bar's data-row (a bar of several runs, the first of them's).
    var timeline = document.querySelector("svg.timeline");
    if (timeline) {
      timeline.addEventListener("click", function (event) {
        var rect = event.target.closest ? event.target.closest("rect[data-row]") : null;
        if (!rect) { return; }
        var i = Number(rect.getAttribute("data-row"));
        if (i >= 0 && i < N) { open(i); }
      });
    }
    apply();
    // When the first rows are in the page (what docs/observe.md measures).
    if (window.performance && performance.mark) { performance.mark("sluicegate:rows"); }
  }

  // ------------------------------------------------- the per-task reduced table

  // T.names: the reduced scores; T.rows: one per task, {task, rollouts,
  // values} with a value (or null) per name.
  function tasks(T) {
    var table = document.getElementById("tasks");
    var more = document.getElementById("tasks-more");
    var head = el("tr");
    ["task id", "rollouts"].concat(T.names).forEach(function (name) {
      head.appendChild(el("th", null, name));
    });
    table.appendChild(head);
    // How many of T.rows are in the table (add() only).
    var done = 0;
    function add() {
      var to = Math.min(T.rows.length, done + PAGE);
      var fragment = document.createDocumentFragment();
      for (; done < to; done++) {
        var line = el("tr"), task = T.rows[done];
        var first = el("td", null, shortId(task.task));
        first.title = task.task;
        line.appendChild(first);
        line.appendChild(el("td", null, task.rollouts === null ? "" : String(task.rollouts)));
        task.values.forEach(function (value) { line.appendChild(el("td", null, number(value))); });
        fragment.appendChild(line);
      }
      table.appendChild(fragment);
      more.hidden = done >= T.rows.length;
      more.textContent = "show more tasks (" + (T.rows.length - done) + " more)";
    }
    more.addEventListener("click", add);
    add();
  }

  // ------------------------------------------------------- the comparison page

  // C.changes: one per changed task, worst regression first: task; scores,
  // each {name, a, b, delta, worse}; rows_a and rows_b, the task's samples
  // in each run. A sample is the report's, with ``row``: what the report's
  // row shows of it (score, duration, attempts, rollout, status).
  function comparison(C) {
    fieldNames = C.fields;
    var sampleA = samples("a-sample-", C.chunk), sampleB = samples("b-sample-", C.chunk);
    var holder = document.getElementById("changes");
    var more = document.getElementById("changes-more");
    // How many of C.changes are in the list (add() only).
    var done = 0;
    function side(name, indices, of) {
      var box = el("div");
      box.appendChild(el("h3", "u", name));
      if (!indices.length) { box.appendChild(el("p", "muted", "no row of this task")); }
      indices.forEach(function (index) {
        var s = of(index);
        box.appendChild(el("div", "muted", "rollout " + s.row.rollout + ": " + s.row.status));
        box.appendChild(sample(s, s.row));
      });
      return box;
    }
    // One cell per column, holding a line per changed score.
    function cells(entry, cls, of) {
      var cell = el("span", cls);
      entry.scores.forEach(function (score) {
        var line = el("span", "line" + (of === "delta" ? (score.worse ? " worse" : " better") : ""),
          score[of]);
        cell.appendChild(line);
      });
      return cell;
    }
    function change(entry) {
      var details = el("details");
      details.setAttribute("data-task", entry.task);
      var line = el("summary");
      var task = el("span", "u", shortId(entry.task));
      task.title = entry.task;
      line.appendChild(task);
      line.appendChild(cells(entry, "u", "name"));
      line.appendChild(cells(entry, "num", "a"));
      line.appendChild(cells(entry, "num", "b"));
      line.appendChild(cells(entry, "num", "delta"));
      details.appendChild(line);
      // filled: whether the samples are drawn (once, on the first opening).
      details.addEventListener("toggle", function () {
        if (!details.open || details.filled) { return; }
        details.filled = true;
        whenRead(function () {
          var pair = el("div", "pair");
          pair.appendChild(side(C.names[0], entry.rows_a, sampleA));
          pair.appendChild(side(C.names[1], entry.rows_b, sampleB));
          details.appendChild(pair);
        });
      });
      return details;
    }
    function add() {
      var to = Math.min(C.changes.length, done + PAGE);
      var fragment = document.createDocumentFragment();
      for (; done < to; done++) { fragment.appendChild(change(C.changes[done])); }
      holder.appendChild(fragment);
      more.hidden = done >= C.changes.length;
      more.textContent = "show more tasks (" + (C.changes.length - done) + " more)";
    }
    if (holder) {
      more.addEventListener("click", add);
      add();
    }
  }

  var rows = parse("rows-data");
  if (rows) { report(rows); }
  var reduced = parse("tasks-data");
  if (reduced) { tasks(reduced); }
  var compared = parse("compare-data");
  if (compared) { comparison(compared); }
})();
