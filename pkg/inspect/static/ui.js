// Follows a session: server-sent events say when its last applied
// sequence moves, and the page fetches what it lacks (the records after
// the last it shows, the fates now of those it shows, the summary), one
// fetch at a time, never the whole page again. No inline script: the
// pages' CSP allows only this file.
(function () {
  "use strict";
  var root = document.getElementById("session");
  if (!root || root.dataset.live !== "true" || !window.EventSource) return;
  var status = document.getElementById("live-status");
  var follow = document.getElementById("follow");
  var tbody = root.querySelector("table.records tbody");
  var shown = root.dataset.seq;
  var latest = shown;
  var busy = false;
  var es = new EventSource(root.dataset.events);
  function say(s) { if (status) status.textContent = s; }
  function first() {
    var r = tbody.querySelector("tr.rec");
    return r ? r.dataset.seq : shown;
  }
  function apply(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var up = doc.getElementById("update");
    if (!up) throw new Error("no update");
    if (up.dataset.more === "true") { location.reload(); return; }
    up.querySelectorAll("ul.fates li").forEach(function (li) {
      var tr = document.getElementById("seq-" + li.dataset.seq);
      if (!tr || tr.dataset.status === li.dataset.status) return;
      var st = li.dataset.status;
      tr.className = "rec st-" + st;
      tr.dataset.status = st;
      var span = tr.querySelector("span.status");
      if (span) { span.className = "status st-" + st; span.textContent = st; }
      var rule = tr.querySelector(".rule");
      if (rule) rule.textContent = li.textContent;
    });
    var rows = up.querySelector("tbody");
    while (rows && rows.firstChild) {
      var n = rows.firstChild;
      if (n.id && document.getElementById(n.id)) { rows.removeChild(n); continue; }
      tbody.appendChild(n);
    }
    var conv = up.querySelector("#conversation");
    var oldConv = document.getElementById("conversation");
    if (conv && oldConv) oldConv.replaceWith(conv);
    var sum = up.querySelector("p.summary");
    var old = root.querySelector("p.summary");
    if (sum && old) old.replaceWith(sum);
    shown = up.dataset.seq;
    root.dataset.seq = shown;
    say("following, seq " + shown);
  }
  function update() {
    if (busy || latest === shown || (follow && !follow.checked)) return;
    busy = true;
    var url = root.dataset.base + "?after=" + encodeURIComponent(shown) + "&from=" + encodeURIComponent(first());
    fetch(url, { credentials: "same-origin" }).then(function (r) {
      if (r.status === 503) { say("busy, trying again"); return new Promise(function (ok) { setTimeout(ok, 2000); }); }
      if (!r.ok) throw new Error(r.status);
      return r.text().then(apply);
    }).catch(function (e) {
      say("update failed: " + e + "; trying again");
      return new Promise(function (ok) { setTimeout(ok, 2000); });
    })
      .then(function () { busy = false; update(); });
  }
  es.addEventListener("open", function () { say("following"); });
  es.addEventListener("error", function () { say("reconnecting…"); });
  es.addEventListener("seq", function (ev) { latest = ev.data; update(); });
  if (follow) follow.addEventListener("change", update);
})();
