/* Covel host bridge, injected into every plugin view entry page served from /plugin-assets/.
   The page talks to the Covel client that framed it through postMessage only. */
(function () {
  "use strict";
  var host = window.parent;
  function post(type, payload) {
    host.postMessage({ source: "covel-plugin-view", type: type, payload: payload }, "*");
  }
  var listeners = [];
  window.addEventListener("message", function (event) {
    if (event.source !== host || !event.data || event.data.source !== "covel-host") return;
    for (var i = 0; i < listeners.length; i++) listeners[i](event.data);
  });
  window.covel = Object.freeze({
    emitEvent: function (topic, data) { post("emit-event", { topic: String(topic), data: data === undefined ? null : data }); },
    resize: function (height) { post("resize", { height: Number(height) }); },
    onMessage: function (handler) { if (typeof handler === "function") listeners.push(handler); }
  });
  post("ready", {});
})();
