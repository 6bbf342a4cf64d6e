// Follows a session: server-sent events say when its last applied
// sequence moves, and the page fetches itself again and swaps its main
// element. No inline script: the pages' CSP allows only this file.
(function () {
  "use strict";
  var root = document.getElementById("session");
  if (!root || root.dataset.live !== "true" || !window.EventSource) return;
  var status = document.getElementById("live-status");
  var follow = document.getElementById("follow");
  var shown = root.dataset.seq;
  var es = new EventSource(root.dataset.events);
  function say(s) { if (status) status.textContent = s; }
  es.addEventListener("open", function () { say("following"); });
  es.addEventListener("error", function () { say("reconnecting…"); });
  es.addEventListener("seq", function (ev) {
    if (ev.data === shown || (follow && !follow.checked)) return;
    fetch(location.pathname + location.search, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      return r.text();
    }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var next = doc.getElementById("session");
      if (!next) return;
      var checked = follow ? follow.checked : true;
      root.replaceWith(next);
      root = next;
      shown = next.dataset.seq;
      follow = document.getElementById("follow");
      if (follow) follow.checked = checked;
      status = document.getElementById("live-status");
      say("following, seq " + shown);
    }).catch(function (e) { say("reload failed: " + e); });
  });
})();
