// Round axis ticks for the lagsched page's charts, loaded before lagsched.js.
// A reader compares figures against the grid, so its lines sit on round values: 1-2-5 steps for
// counts (0, 2,000, 4,000 ... rather than 0, 3,221.75, 6,443.5 ...), clock-like steps for durations
// (15 s, 30 s, 1 min, 5 min, 1 h ...). Kept apart from the page's code so a browser test can load it alone.
(function (root) {
  "use strict";

  // The smallest step of the form {1, 2, 5} x 10^k, at least `minStep`, that covers [0, max] in at
  // most `count` steps.
  function niceStep(max, count, minStep) {
    const floor = minStep || 0;
    if (!(max > 0)) return Math.max(1, floor);
    const raw = Math.max(max / count, floor);
    let unit = Math.pow(10, Math.floor(Math.log10(raw)));
    for (;;) {
      for (const m of [1, 2, 5]) {
        const step = m * unit;
        // Ten times a power of ten can be a hair off as a float: compare with a tolerance.
        if (step >= floor && step * count >= max * (1 - 1e-12)) return step;
      }
      unit *= 10;
    }
  }

  function ticksOf(step, max) {
    const n = Math.max(1, Math.ceil(max / step - 1e-9));
    const out = [];
    // Multiplying (not adding) keeps 0.1-steps from drifting into 0.30000000000000004.
    for (let i = 0; i <= n; i++) out.push(Number((i * step).toPrecision(12)));
    return out;
  }

  // Ticks from 0 up to the first round value at or above `max`: at most count + 1 of them.
  // `minStep` 1 for whole things (records, workers): no tick between two integers.
  function valueTicks(max, count, minStep) {
    const c = count || 4;
    return ticksOf(niceStep(max, c, minStep), max > 0 ? max : 0);
  }

  // Steps a duration axis in seconds may take; past a day, whole days by 1-2-5.
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

  function timeTicks(max, count) {
    const c = count || 4;
    const m = max > 0 ? max : 0;
    let step = TIME_STEPS.find((s) => s * c >= m);
    if (step === undefined) step = 86400 * niceStep(m / 86400, c, 1);
    if (m < 1) step = niceStep(m, c);
    return ticksOf(step, m);
  }

  // A duration tick in the unit of its axis's step, so every label of one axis is a whole number.
  function timeUnit(step) {
    if (step >= 86400) return [86400, "d"];
    if (step >= 3600) return [3600, "h"];
    if (step >= 60) return [60, "min"];
    return [1, "s"];
  }
  function formatTimeTicks(ticks) {
    const step = ticks.length > 1 ? ticks[1] - ticks[0] : 1;
    const [div, unit] = timeUnit(step);
    return ticks.map((t) => `${Number((t / div).toPrecision(12))} ${unit}`);
  }

  root.lagschedTicks = { niceStep, valueTicks, timeTicks, formatTimeTicks };
})(window);
