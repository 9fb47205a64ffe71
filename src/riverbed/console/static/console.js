// riverbed console: the few things a server-rendered page cannot do alone.
// No inline scripts (the pages' Content-Security-Policy allows only /static).
(function () {
  "use strict";

  // Dates for record timestamps (the server renders milliseconds).
  function showTimes(root) {
    root.querySelectorAll("td.ts[data-ms]").forEach(function (td) {
      var ms = parseInt(td.dataset.ms, 10);
      if (!isNaN(ms) && !td.dataset.done) {
        td.textContent = new Date(ms).toISOString();
        td.title = ms + " ms";
        td.dataset.done = "1";
      }
    });
  }

  // A destructive button stays disabled until the confirmation names its target.
  function guardConfirmations(root) {
    root.querySelectorAll("input[data-must-equal]").forEach(function (input) {
      var button = input.form && input.form.querySelector("[data-confirm-button]");
      if (!button) return;
      var check = function () { button.disabled = input.value !== input.dataset.mustEqual; };
      input.addEventListener("input", check);
      check();
    });
  }

  // Live tail over server-sent events, with the search form's filters.
  function setUpTail() {
    var toggle = document.getElementById("tail-toggle");
    if (!toggle) return;
    var status = document.getElementById("tail-status");
    var rows = document.getElementById("tail-rows");
    var source = null;
    toggle.addEventListener("click", function () {
      if (source) {
        source.close();
        source = null;
        toggle.textContent = "Start live tail";
        status.textContent = "stopped";
        status.dataset.state = "stopped";
        return;
      }
      var params = new URLSearchParams();
      var form = document.getElementById("search");
      ["key", "value", "header", "decode"].forEach(function (name) {
        var field = form && form.elements[name];
        if (field && field.value) params.set(name, field.value);
      });
      source = new EventSource(toggle.dataset.tailUrl + "?" + params.toString());
      toggle.textContent = "Stop live tail";
      status.textContent = "connecting…";
      source.addEventListener("ready", function () {
        status.textContent = "live: waiting for new records";
        status.dataset.state = "live";
      });
      source.addEventListener("record", function (ev) {
        rows.insertAdjacentHTML("afterbegin", JSON.parse(ev.data).html);
        showTimes(rows);
        status.textContent = "live: " + rows.children.length + " new record(s)";
      });
      source.addEventListener("failed", function (ev) {
        source.close();
        source = null;
        toggle.textContent = "Start live tail";
        status.textContent = JSON.parse(ev.data).error;
        status.dataset.state = "failed";
      });
      source.addEventListener("dropped", function (ev) {
        status.textContent = "live: " + JSON.parse(ev.data).count + " record(s) dropped (browser too slow)";
      });
      source.onerror = function () {
        status.textContent = "reconnecting…";
        status.dataset.state = "reconnecting";
      };
    });
  }

  // The group's lag chart: polls /group/lag (each poll adds a sample) every 2 s.
  function setUpLagChart() {
    var box = document.getElementById("lag-chart");
    if (!box || typeof uPlot === "undefined") return;
    var chart = null;
    var total = document.getElementById("total-lag");
    function draw(data) {
      var series = [data.t, data.lag];
      if (chart === null) {
        chart = new uPlot({
          width: Math.min(900, box.clientWidth || 900), height: 220,
          series: [{}, { label: "total lag", stroke: "#2a6fdb", width: 2 }],
          axes: [{}, { label: "records" }],
        }, series, box);
      } else {
        chart.setData(series);
      }
      if (total) total.textContent = data.lag[data.lag.length - 1];
      box.dataset.samples = data.t.length;
    }
    function poll() {
      fetch(box.dataset.lagUrl, { headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) { if (data) draw(data); })
        .catch(function () { /* the next poll tries again */ });
    }
    poll();
    setInterval(poll, 2000);
  }

  // The metrics page: throughput, p99 latency per request type, ISR changes.
  var PALETTE = ["#2a6fdb", "#c62828", "#2e7d32", "#b26a00", "#6a1b9a", "#00838f", "#5d4037", "#455a64"];
  function lineChart(box, labels, previous) {
    if (previous) previous.destroy();
    return new uPlot({
      width: Math.min(900, box.clientWidth || 900), height: 200,
      series: [{}].concat(labels.map(function (label, i) {
        return { label: label, stroke: PALETTE[i % PALETTE.length], width: 2, spanGaps: false };
      })),
    }, [[]].concat(labels.map(function () { return []; })), box);
  }
  function human(n) {
    if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (n >= 1e3) return (n / 1e3).toFixed(1) + "k";
    return n.toFixed(n < 10 ? 1 : 0);
  }
  function setUpMetrics() {
    var root = document.getElementById("metrics-charts");
    if (!root || typeof uPlot === "undefined") return;
    var records = lineChart(document.getElementById("chart-records"), ["records in/s"]);
    var bytes = lineChart(document.getElementById("chart-bytes"), ["bytes in/s", "bytes out/s"]);
    var isr = lineChart(document.getElementById("chart-isr"), ["ISR shrinks", "ISR expands"]);
    var latencyBox = document.getElementById("chart-latency");
    var latency = null;
    var latencyKeys = "";
    var errors = document.getElementById("metrics-errors");
    function draw(d) {
      errors.textContent = (d.errors || []).join("; ");
      if (!d.t || d.t.length === 0) return;
      records.setData([d.t, d.messages_in]);
      bytes.setData([d.t, d.bytes_in, d.bytes_out]);
      isr.setData([d.t, d.isr_shrinks, d.isr_expands]);
      var keys = Object.keys(d.p99_ms).sort();
      if (keys.join(",") !== latencyKeys) {
        latency = lineChart(latencyBox, keys, latency);
        latencyKeys = keys.join(",");
      }
      latency.setData([d.t].concat(keys.map(function (k) { return d.p99_ms[k]; })));
      var last = d.t.length - 1;
      document.getElementById("rate-messages").textContent = human(d.messages_in[last]);
      document.getElementById("rate-bytes-in").textContent = human(d.bytes_in[last]);
      document.getElementById("rate-bytes-out").textContent = human(d.bytes_out[last]);
      root.dataset.points = d.t.length;
      root.dataset.messagesInTotal = d.totals.messages_in;
    }
    function poll() {
      fetch(root.dataset.metricsUrl, { headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (d) { if (d) draw(d); })
        .catch(function () { /* the next poll tries again */ });
    }
    poll();
    setInterval(poll, 2000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    showTimes(document);
    guardConfirmations(document);
    setUpTail();
    setUpLagChart();
    setUpMetrics();
    document.body.addEventListener("htmx:afterSwap", function (ev) { showTimes(ev.target); });
    document.documentElement.dataset.consoleReady = "1";  // tests wait for this
  });
})();
