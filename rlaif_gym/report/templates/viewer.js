(function () {
  "use strict";
  // The trajectory viewer of an rlaif-gym report. Trajectory text is untrusted: every string goes
  // into the page as a text node (never innerHTML), and the page's CSP allows only this script.
  var root = document.getElementById("viewer");
  var DATA = null;
  var state = { run: 0, traj: 0, filter: "all", n: 10, tick: null, only: false };
  var openTicks = {};

  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (attrs[k] !== null && attrs[k] !== undefined && attrs[k] !== false) { node.setAttribute(k, String(attrs[k])); }
      });
    }
    for (var i = 2; i < arguments.length; i++) { add(node, arguments[i]); }
    return node;
  }

  function add(node, child) {
    if (child === null || child === undefined) { return; }
    if (Array.isArray(child)) { child.forEach(function (c) { add(node, c); }); return; }
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }

  function num(v, digits) {
    if (v === null || v === undefined) { return "n/a"; }
    if (typeof v !== "number") { return String(v); }
    return v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  function signed(v, digits) {
    if (typeof v !== "number") { return num(v, digits); }
    return (v > 0 ? "+" : "") + num(v, digits);
  }

  function isError(s) {
    if (!s.a || !s.a.ok) { return true; }
    if (s.fe && s.fe.length) { return true; }
    return (s.calls || []).some(function (c) { return c.err; });
  }

  function readHash() {
    var h = window.location.hash.replace(/^#/, "");
    h.split("&").forEach(function (part) {
      var kv = part.split("=");
      if (kv.length !== 2) { return; }
      var key = decodeURIComponent(kv[0]), value = decodeURIComponent(kv[1]);
      if (key === "run" || key === "traj" || key === "n") { var x = parseInt(value, 10); if (!isNaN(x) && x >= 0) { state[key] = x; } }
      if (key === "filter" && ["all", "errors", "worst-reward", "worst-pnl"].indexOf(value) >= 0) { state.filter = value; }
      if (key === "tick") { var t = parseInt(value, 10); state.tick = isNaN(t) ? null : t; }
      if (key === "only") { state.only = value === "viewer"; }
    });
    state.run = Math.min(state.run, DATA.runs.length - 1);
    state.traj = Math.min(state.traj, Math.max(DATA.runs[state.run].trajectories.length - 1, 0));
    openTicks = {};
    if (state.tick !== null) { openTicks[state.tick] = true; }
  }

  function writeHash() {
    var h = "run=" + state.run + "&traj=" + state.traj + "&filter=" + state.filter + "&n=" + state.n +
      (state.only ? "&only=viewer" : "");
    if (window.history && window.history.replaceState) { window.history.replaceState(null, "", "#" + h); }
  }

  function visibleSteps(steps) {
    var list = steps.slice();
    if (state.filter === "errors") { return list.filter(isError); }
    if (state.filter === "worst-reward") { list.sort(function (a, b) { return a.r - b.r; }); return list.slice(0, state.n); }
    if (state.filter === "worst-pnl") { list.sort(function (a, b) { return a.pd - b.pd; }); return list.slice(0, state.n); }
    return list;
  }

  function select(options, value, onchange, attrs) {
    var s = el("select", attrs);
    options.forEach(function (o) { var opt = el("option", { value: o[0] }, o[1]); if (String(o[0]) === String(value)) { opt.selected = true; } s.appendChild(opt); });
    s.addEventListener("change", function () { onchange(s.value); });
    return s;
  }

  function controls(run) {
    var bar = el("div", { class: "controls" });
    if (DATA.runs.length > 1) {
      bar.appendChild(el("label", null, "run", select(DATA.runs.map(function (r, i) { return [i, r.name]; }), state.run,
        function (v) { state.run = parseInt(v, 10); state.traj = 0; openTicks = {}; render(); }, { id: "rg-run" })));
    }
    var trajOptions = run.trajectories.map(function (t, i) {
      return [i, t.id + " · " + t.status + " · PnL " + signed(t.pnl, 2) + (t.errors.length ? " · " + t.errors.length + " error(s)" : "")];
    });
    bar.appendChild(el("label", null, "trajectory", select(trajOptions, state.traj,
      function (v) { state.traj = parseInt(v, 10); openTicks = {}; render(); }, { id: "rg-traj" })));
    bar.appendChild(el("label", null, "show", select([["all", "all ticks"], ["errors", "ticks with errors"],
      ["worst-reward", "worst ticks by reward"], ["worst-pnl", "worst ticks by PnL change"]], state.filter,
      function (v) { state.filter = v; render(); }, { id: "rg-filter" })));
    var n = el("input", { type: "number", min: 1, max: 10000, value: state.n, id: "rg-n" });
    n.addEventListener("change", function () { var x = parseInt(n.value, 10); if (x > 0) { state.n = x; render(); } });
    bar.appendChild(el("label", null, "worst N", n));
    return bar;
  }

  function header(t) {
    var box = el("div", { class: "traj-header" });
    box.appendChild(el("p", null,
      el("span", { class: "badge" + (t.status === "completed" ? "" : " bad") }, t.status),
      " agent ", el("b", null, t.agent), " · seed ", String(t.seed), " · ", String(t.steps.length), " ticks · PnL ",
      el("b", null, signed(t.pnl, 2) + " USD"), " · PnL ", signed(t.pnl_ratio === null ? null : 100 * t.pnl_ratio, 2) + "% of starting cash · reward ",
      num(t.reward, 3), " · judge ", num(t.judge, 3)));
    if (t.note) { box.appendChild(el("p", { class: "muted" }, t.note)); }
    if (t.errors.length || t.failed.length) {
      var ul = el("ul", { class: "error" });
      t.errors.forEach(function (e) { ul.appendChild(el("li", null, e)); });
      t.failed.forEach(function (c) { ul.appendChild(el("li", null, "failed call: " + (c.err || "") + " (" + num(c.lat, 1) + " ms)")); });
      box.appendChild(el("div", null, el("b", null, "Episode errors"), ul));
    }
    if (t.trades && t.trades.length) {
      var rows = t.trades.map(function (x) {
        return el("tr", null, el("td", null, x[0]), el("td", { class: "num" }, String(x[1])), el("td", { class: "num" }, String(x[2])),
          el("td", { class: "num" }, num(x[3], 2)), el("td", { class: "num" }, num(x[4], 2)), el("td", { class: "num" }, signed(x[4] - x[3], 2)), el("td", null, x[5]));
      });
      box.appendChild(el("details", null, el("summary", null, "closed trades (" + t.trades.length + ", replayed)"),
        el("table", null, el("thead", null, el("tr", null, el("th", null, "position"), el("th", { class: "num" }, "opened"), el("th", { class: "num" }, "closed"),
          el("th", { class: "num" }, "cost"), el("th", { class: "num" }, "proceeds"), el("th", { class: "num" }, "PnL"), el("th", null, "closed by"))), el("tbody", null, rows))));
    }
    return box;
  }

  function highlighted(reply, reasoning) {
    var pre = el("pre", { class: "reply" });
    var re = /<(think|thinking)>([\s\S]*?)<\/\1>/gi;
    var last = 0, m, found = false;
    while ((m = re.exec(reply)) !== null) {
      found = true;
      add(pre, reply.slice(last, m.index));
      pre.appendChild(el("span", { class: "tag" }, m[0].slice(0, m[1].length + 2)));
      pre.appendChild(el("mark", { class: "reasoning" }, m[2]));
      pre.appendChild(el("span", { class: "tag" }, "</" + m[1] + ">"));
      last = m.index + m[0].length;
    }
    if (!found && reasoning) {
      var k = reply.indexOf(reasoning);
      if (k >= 0) {
        add(pre, reply.slice(0, k));
        pre.appendChild(el("mark", { class: "reasoning" }, reasoning));
        last = k + reasoning.length;
      }
    }
    add(pre, reply.slice(last));
    return pre;
  }

  function kv(obj, digits) {
    var tb = el("tbody");
    Object.keys(obj || {}).forEach(function (k) { tb.appendChild(el("tr", null, el("td", null, k), el("td", { class: "num" }, num(obj[k], digits)))); });
    return el("table", null, tb);
  }

  function detail(s, t, ncols) {
    var weights = DATA.runs[state.run].weights || {};
    var comps = el("tbody");
    Object.keys(s.c).forEach(function (k) {
      comps.appendChild(el("tr", null, el("td", null, k), el("td", { class: "num" }, num(s.c[k], 4)), el("td", { class: "num" }, weights[k] === undefined ? "" : num(weights[k], 2))));
    });
    var action = s.a ? Object.assign({ type: s.a.t }, s.a.p) : null;
    var left = el("div", null,
      el("h3", null, "Reply (reasoning highlighted)"), highlighted(s.rep || "", s.rs || ""),
      el("h3", null, "Parsed action"), el("pre", { class: "action" }, action && s.a.t !== "invalid" ? JSON.stringify(action, null, 2) : "(none: the reply had no executable action)"),
      s.fe && s.fe.length ? [el("h3", { class: "error" }, "Format errors"), el("ul", { class: "error" }, s.fe.map(function (e) { return el("li", null, e); }))] : null,
      el("h3", null, "Prompt"), el("details", null, el("summary", null, "tick prompt (" + (s.p || "").length + " characters)"), el("pre", { class: "prompt" }, s.p || "")),
      s.up ? el("details", null, el("summary", null, "user prompt sent to the model (differs from the observation)"), el("pre", null, s.up)) : null,
      el("details", null, el("summary", null, "system prompt"), el("pre", null, DATA.system[t.sys] || "")));
    var fb = el("ul");
    fb.appendChild(el("li", null, s.a && s.a.ok ? "executed" : el("span", { class: "error" }, "not executed" + (s.a && s.a.e ? ": " + s.a.e : ""))));
    fb.appendChild(el("li", null, "equity before " + num(s.eq, 2) + " USD, change over the tick " + signed(s.pd, 2) + " USD"));
    if (s.fee !== undefined) { fb.appendChild(el("li", null, "fee paid " + num(s.fee, 2) + " USD, resolution payout " + num(s.pay, 2) + " USD (replayed)")); }
    (s.res || []).forEach(function (r) {
      fb.appendChild(el("li", null, r[0] + " resolved " + (r[1] ? "YES" : "NO") + " (true p " + num(r[2], 3) + ", last price " + num(r[3], 3) + "); you held " + num(r[4], 2) + " YES / " + num(r[5], 2) + " NO"));
    });
    var calls = (s.calls || []).map(function (c) {
      return el("li", { class: c.err ? "error" : null }, (c.m || "?") + " · " + num(c.lat, 1) + " ms · tokens " + num(c.pt, 0) + " + " + num(c.ct, 0) +
        " · finish " + (c.fin || "n/a") + " · seed " + (c.seed === null ? "n/a" : c.seed) + " · attempts " + c.att + (c.err ? " · error " + c.err : ""));
    });
    var right = el("div", null,
      el("h3", null, "Feedback"), fb,
      el("h3", null, "Reward " + num(s.r, 4) + " and its components (raw, weight)"), el("table", null, comps),
      el("h3", null, "LLM call"), el("ul", null, calls),
      el("details", null, el("summary", null, "rule judge breakdown"), kv(s.j, 3)));
    return el("tr", { class: "detail", "data-detail": s.i }, el("td", { colspan: ncols }, el("div", { class: "grid" }, left, right)));
  }

  function tickTable(t) {
    var names = DATA.runs[state.run].components;
    var head = el("tr", null, el("th", { class: "num" }, "tick"), el("th", null, "action"), el("th", null, "ok"), el("th", { class: "num" }, "PnL Δ (USD)"),
      el("th", { class: "num" }, "reward"), names.map(function (n) { return el("th", { class: "num" }, n); }), el("th", null, "flags"));
    var ncols = 6 + names.length;
    var body = el("tbody");
    var shown = visibleSteps(t.steps);
    shown.forEach(function (s) {
      var bad = isError(s);
      var flags = [];
      if (s.fe && s.fe.length) { flags.push("format"); }
      if (s.a && !s.a.ok) { flags.push("failed"); }
      if ((s.calls || []).some(function (c) { return c.err; })) { flags.push("call error"); }
      if (s.res && s.res.length) { flags.push("resolution"); }
      var row = el("tr", { class: "tick" + (bad ? " bad" : "") + (openTicks[s.i] ? " open" : ""), "data-tick": s.i },
        el("td", { class: "num" }, String(s.i)), el("td", null, s.a ? s.a.t : "none"), el("td", null, s.a && s.a.ok ? "✓" : "✗"),
        el("td", { class: "num" }, signed(s.pd, 2)), el("td", { class: "num" }, signed(s.r, 3)),
        names.map(function (n) { return el("td", { class: "num" }, s.c[n] === undefined ? "" : signed(s.c[n], 3)); }),
        el("td", null, flags.join(", ")));
      row.addEventListener("click", function () { if (openTicks[s.i]) { delete openTicks[s.i]; } else { openTicks[s.i] = true; } render(); });
      body.appendChild(row);
      if (openTicks[s.i]) { body.appendChild(detail(s, t, ncols)); }
    });
    return [el("p", { class: "muted", id: "rg-count" }, "showing " + shown.length + " of " + t.steps.length + " ticks"),
      el("table", { class: "ticks" }, el("thead", null, head), body)];
  }

  function render() {
    var run = DATA.runs[state.run];
    root.textContent = "";
    root.appendChild(controls(run));
    if (!run.trajectories.length) { root.appendChild(el("p", null, "This run has no trajectories.")); return; }
    var t = run.trajectories[state.traj];
    root.appendChild(header(t));
    add(root, tickTable(t));
    writeHash();
  }

  async function load() {
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser cannot read the embedded trajectories (it lacks DecompressionStream; use Chrome 80+, Firefox 113+ or Safari 16.4+)");
    }
    var b64 = document.getElementById("rg-data").textContent.trim();
    var raw = atob(b64);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { bytes[i] = raw.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  load().then(function (data) {
    DATA = data;
    readHash();
    document.getElementById("static").hidden = state.only;  // #...&only=viewer: the viewer alone
    render();
    if (state.tick !== null && !state.only) {  // a link to one tick: show it
      var row = root.querySelector('tr[data-tick="' + state.tick + '"]');
      if (row) { row.scrollIntoView(); }
    }
    window.addEventListener("hashchange", function () {
      readHash();
      document.getElementById("static").hidden = state.only;
      render();
      root.scrollIntoView();
    });
    document.body.setAttribute("data-viewer", "ready");
  }).catch(function (err) {
    root.textContent = "";
    root.appendChild(el("p", { class: "error" }, "The viewer could not load the trajectories: " + (err && err.message ? err.message : String(err))));
    document.body.setAttribute("data-viewer", "error");
  });
})();
