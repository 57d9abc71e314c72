// nrtprof report: draws the page from the capture's data in #nrtprof-data. Compiled into the
// nrtprof binary (client/BUILD) and inlined into each report; it fetches nothing.
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('nrtprof-data').textContent);
  const app = document.getElementById('app');
  const SVG = 'http://www.w3.org/2000/svg';

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children || []) e.append(c);
    return e;
  }
  function svgEl(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  // As the summary table writes times: 2.355ms, 365.521us.
  function duration(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(3) + 's';
    if (ns >= 1e6) return (ns / 1e6).toFixed(3) + 'ms';
    return (ns / 1e3).toFixed(3) + 'us';
  }
  // An axis tick at a round time, in the unit of the view's end: 20ms, 10.8ms, 250us.
  function tickLabel(t, end) {
    const [unit, ns] = end >= 1e9 ? ['s', 1e9] : end >= 1e6 ? ['ms', 1e6] : end >= 1e3 ? ['us', 1e3] : ['ns', 1];
    return parseFloat((t / ns).toPrecision(7)) + unit;
  }
  // Op colours. A hash of the name gave aten::mul and aten::rsqrt nearly the same yellow, so
  // names take colours from a palette of clearly different ones, in order of device time
  // (the chart's order: the ops that matter most get the most distinct colours), then of their
  // first appearance in the trace. None is grey: grey marks stand for slices too small to draw.
  // Steps ("ProfilerStep#N") share one colour, as they share the table's row "ProfilerStep*".
  const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#b07aa1', '#edc948', '#76b7b2',
    '#ff9da7', '#9c755f', '#cc33cc', '#33cc33', '#8674dc', '#ded39c', '#a6cc33', '#d4549f',
    '#95e4af', '#d47e54', '#e495e4', '#bf9540', '#a19cde'];
  const colours = new Map();
  const colourKey = (name) => name.replace(/^ProfilerStep#\d+$/, 'ProfilerStep*');
  function colour(name) {
    const key = colourKey(name);
    if (!colours.has(key)) {
      const i = colours.size;
      // Past the palette: hues a golden angle apart, so that neighbours in order still differ.
      colours.set(key, i < PALETTE.length ? PALETTE[i]
        : 'hsl(' + Math.round((i * 137.508) % 360) + ',50%,' + (58 + (i % 3) * 7) + '%)');
    }
    return colours.get(key);
  }
  // The rows with device time, most first: the chart's bars.
  function deviceRows() {
    return data.summary.rows.filter((r) => r.values[3] > 0)
      .sort((a, b) => b.values[3] - a.values[3] || (a.values[0] < b.values[0] ? -1 : 1));
  }
  deviceRows().forEach((r) => colour(r.cells[0]));
  data.names.forEach(colour);

  // ---- The capture: command, host, date, window ----
  function header() {
    const c = data.capture;
    app.append(el('h1', {}, ['nrtprof report: ' + (c.id || '(no id)')]));
    const facts = el('dl', { class: 'facts', id: 'facts' });
    const add = (k, v) => facts.append(el('dt', {}, [k]), el('dd', {}, [v]));
    c.commands.forEach((cmd, i) => add(i === 0 ? 'Command' : '', cmd));
    if (c.commands.length === 0) add('Command', '(no process)');
    add('Host', c.hosts.join(', ') || '(unknown)');
    add('Date', c.date || '(unknown)');
    add('Window', c.window);
    if (c.trigger) add('Triggered by', c.trigger);
    add('Capture', c.dir);
    add('Events', data.drawn.total + ' slices from ' + data.processes.length + ' process(es)');
    app.append(facts);
    if (data.drawn.truncated) {
      app.append(el('p', { class: 'notice', id: 'truncated' }, [
        'Large capture: the timeline draws the first ' + data.drawn.slices + ' of ' +
        data.drawn.total + ' slices one by one (up to ' + data.drawn.until + ' of ' + c.window +
        '); after that it shows each lane\'s busy time per 1/' + (data.lanes[0] || { density: [] }).density.length +
        ' of the window. The table, the chart and the utilization count every event.']));
    }
  }

  // ---- The top ops by self device time ----
  function chart() {
    app.append(el('h2', {}, ['Top ops by self device time (Self NEURON)']));
    const rows = deviceRows().slice(0, 12);
    if (rows.length === 0) {
      app.append(el('p', {}, ['No device time in this capture.']));
      return;
    }
    const labelW = 260, barW = 640, rowH = 22, W = labelW + barW + 170;
    const chartSvg = svgEl('svg', { class: 'chart', id: 'chart', width: W, height: rows.length * rowH + 6,
      viewBox: '0 0 ' + W + ' ' + (rows.length * rowH + 6) });
    const max = rows[0].values[3];
    rows.forEach((r, i) => {
      const y = i * rowH + 3;
      const name = svgEl('text', { x: labelW - 8, y: y + 15, 'text-anchor': 'end' });
      name.textContent = r.cells[0].length > 36 ? r.cells[0].slice(0, 33) + '...' : r.cells[0];
      const w = Math.max(1, barW * r.values[3] / max);
      const bar = svgEl('rect', { x: labelW, y: y + 2, width: w, height: rowH - 6, fill: colour(r.cells[0]),
        'data-name': r.cells[0] });
      const value = svgEl('text', { class: 'value', x: labelW + w + 6, y: y + 15 });
      value.textContent = r.cells[3] + '  (' + r.cells[4] + ')';
      chartSvg.append(name, bar, value);
    });
    app.append(chartSvg);
  }

  // ---- The key_averages table, sortable by each column ----
  function table() {
    app.append(el('h2', {}, ['Operators (key_averages)']));
    const heads = ['Name', 'Self CPU', 'CPU total', 'Self NEURON', 'Self NEURON %', 'NEURON total',
      'NEURON time avg', '# of Calls'];
    // A capture with async work: each op's queue wait, before the count (as in summary.txt).
    if (data.summary.async) heads.splice(heads.length - 1, 0, 'Queue wait avg');
    const t = el('table', { id: 'ops' });
    const headRow = el('tr');
    const body = el('tbody');
    let sortKey = 3, descending = true;
    function fill() {
      const rows = data.summary.rows.slice().sort((a, b) => {
        const x = a.values[sortKey], y = b.values[sortKey];
        const order = x < y ? -1 : x > y ? 1 : 0;
        return (descending ? -order : order) || (a.values[0] < b.values[0] ? -1 : 1);
      });
      body.replaceChildren(...rows.map((r) => el('tr', {}, r.cells.map((c, i) =>
        el('td', i === 0 ? { class: 'name', title: 'show the first ' + c + ' in the timeline' } : {}, [c])))));
      heads.forEach((h, i) => {
        headRow.children[i].textContent = h + (i === sortKey ? (descending ? ' \u25bc' : ' \u25b2') : '');
      });
    }
    heads.forEach((h, i) => {
      const th = el('th', { class: 'sortable', title: 'sort by ' + h }, [h]);
      th.addEventListener('click', () => {
        descending = sortKey === i ? !descending : i !== 0;
        sortKey = i;
        fill();
      });
      headRow.append(th);
    });
    body.addEventListener('click', (ev) => {
      const cell = ev.target.closest('td.name');
      if (cell) showFirst(cell.textContent);
    });
    t.append(el('thead', {}, [headRow]), body);
    fill();
    app.append(t, el('div', { class: 'closing', id: 'closing' }, [data.summary.closing.join('\n')]));
  }

  // ---- Device time by stack: an icicle graph (the root on top) of the export's stacks ----
  // data.flame.frames: [name, parent, device ns, device time, share, host ns, executions], each
  // after its parent, siblings the most device time first; frame 0 is the root, all device time.
  // data.flame.totals, per name: [device ns, device time, share, frames] of all its frames.
  function flame() {
    app.append(el('h2', { id: 'flame-title' }, ['Device time by stack (flame graph)']));
    const f = data.flame;
    if (!f || f.error !== undefined) {
      app.append(el('p', { class: 'notice', id: 'flame-error' }, ['No flame graph: ' + (f ? f.error : 'no stacks') +
        '. The table above counts every event.']));
      return;
    }
    const frames = f.frames;
    if (frames.length === 0 || frames[0][2] === 0) {
      app.append(el('p', {}, ['No device time in this capture.']));
      return;
    }
    const children = frames.map(() => []);
    const depth = [0];
    let maxDepth = 0;
    for (let i = 1; i < frames.length; i++) {
      children[frames[i][1]].push(i);
      depth[i] = depth[frames[i][1]] + 1;
      maxDepth = Math.max(maxDepth, depth[i]);
    }
    const name = (i) => i === 0 ? 'all device time' : f.names[frames[i][0]];
    const ROW = 18;
    let focus = 0;
    const reset = el('button', { id: 'flame-reset' }, ['Reset zoom']);
    reset.addEventListener('click', () => { focus = 0; draw(); });
    app.append(el('p', { class: 'hint' }, [
      'Each frame is as wide as the device time of the stacks through it. From the top: all device time, ' +
      'the framework ranges (outermost first: ProfilerStep*, the ops), the runtime call, the model and, ' +
      'captured with --device-profile, the engine op; with --stacks, the program\'s own functions above ' +
      'the ranges. The same stacks as nrtprof export. Hover a frame for its device time and share; ' +
      'click it to zoom into it, click it again (or a frame above it) to zoom out.']));
    app.append(el('div', { class: 'toolbar' }, [reset, el('span', { class: 'view-note', id: 'flame-note' })]));
    const box = el('div', { id: 'flame' });
    const svg = svgEl('svg', { xmlns: SVG });
    box.append(svg);
    app.append(box);
    let width = Math.max(600, box.clientWidth || 1000);

    function title(i) {
      const fr = frames[i];
      let text = name(i) + '\ndevice time ' + fr[3] + ', ' + fr[4] + ' of all device time';
      if (focus !== 0 && i !== focus && depth[i] > depth[focus]) {
        text += ', ' + (100 * fr[2] / frames[focus][2]).toFixed(2) + '% of ' + name(focus);
      }
      // A name on several paths (an op in and out of the steps): all of it, as the table counts it.
      const all = i === 0 ? null : f.totals[fr[0]];
      if (all && all[3] > 1) {
        text += '\nin all ' + all[3] + ' ' + name(i) + ' frames: ' + all[1] + ', ' + all[2] + ' of all device time';
      }
      text += '\nhost time in its runtime calls ' + duration(fr[5]);
      if (fr[6] > 0) text += '\nexecutions ' + fr[6];
      return text;
    }
    function frameRect(g, i, x, w, cls) {
      const y = depth[i] * ROW;
      const r = svgEl('rect', { class: cls, x: x, y: y + 1, width: Math.max(w - 0.5, 0.5), height: ROW - 2,
        fill: i === 0 ? '#c9ced8' : colour(name(i)), 'data-frame': i, 'data-parent': i === 0 ? -1 : frames[i][1],
        'data-name': name(i), 'data-depth': depth[i] });
      const t = svgEl('title');
      t.textContent = title(i);
      r.append(t);
      g.append(r);
      if (w > 40) {
        const label = svgEl('text', { class: 'frame-name', x: x + 3, y: y + 13 });
        const text = name(i) + ' ' + frames[i][3];
        label.textContent = text.slice(0, Math.floor((w - 6) / 6.5));
        g.append(label);
      }
    }
    function draw() {
      const g = svgEl('g');
      // Above the zoomed frame, what it is under, the whole width.
      for (let a = frames[focus][1]; focus !== 0; a = frames[a][1]) {
        frameRect(g, a, 0, width, 'frame above');
        if (a === 0) break;
      }
      const scale = width / frames[focus][2];
      const pending = [[focus, 0]];
      while (pending.length > 0) {
        const [i, x] = pending.pop();
        const w = frames[i][2] * scale;
        if (w < 0.3) continue;  // narrower than a third of a pixel at this zoom: not drawn
        frameRect(g, i, x, w, i === focus ? 'frame focus' : 'frame');
        let at = x + w;
        for (let k = children[i].length - 1; k >= 0; k--) {  // the widest first, on the left
          const c = children[i][k];
          at -= frames[c][2] * scale;
          pending.push([c, at]);
        }
      }
      svg.setAttribute('width', width);
      svg.setAttribute('height', (maxDepth + 1) * ROW + 2);
      svg.replaceChildren(g);
      document.getElementById('flame-note').textContent = focus === 0
        ? 'Showing all ' + frames[0][3] + ' of device time.'
        : 'Zoomed into ' + name(focus) + ': ' + frames[focus][3] + ', ' + frames[focus][4] +
          ' of all device time. Click it again, a frame above it or Reset zoom to zoom out.';
    }
    svg.addEventListener('click', (ev) => {
      const hit = ev.target.closest('[data-frame]');
      if (!hit) return;
      const i = Number(hit.getAttribute('data-frame'));
      focus = i === focus ? (i === 0 ? 0 : frames[i][1]) : i;
      draw();
    });
    new ResizeObserver(() => {
      const now = Math.max(600, box.clientWidth || 1000);
      if (now !== width) {
        width = now;
        draw();
      }
    }).observe(box);
    draw();
  }

  // ---- The timeline: lanes per process and NeuronCore, zoomable, and the chain ----
  const LABEL_W = 230, ROW_H = 16, AXIS_H = 22, PROCESS_H = 20;
  const laneBase = [];  // global index of each lane's first slice
  const flowSlices = new Map();  // flow id -> global slice indices
  const sliceFlows = new Map();  // global slice index -> flow ids
  const sliceLane = [];  // global slice index -> [lane, index]
  function indexSlices() {
    let base = 0;
    data.lanes.forEach((lane, li) => {
      laneBase.push(base);
      for (let i = 0; i < lane.s.length; i++) sliceLane.push([li, i]);
      for (const [i, ...flows] of lane.f) {
        sliceFlows.set(base + i, flows);
        for (const f of flows) {
          if (!flowSlices.has(f)) flowSlices.set(f, []);
          flowSlices.get(f).push(base + i);
        }
      }
      base += lane.s.length;
    });
  }

  // Opens on what the page chose (report_page.h: the busiest step, say), not the whole window,
  // where most slices of a long capture are too small to draw.
  const view = { t0: data.initial.start_ns, t1: Math.max(data.initial.start_ns + 1, data.initial.end_ns) };
  let selection = null;  // { index, chain: Set of global indices }
  let svgRoot = null, width = 1000;

  function layout() {
    const rows = [];
    let y = AXIS_H, lastProcess = -1;
    data.lanes.forEach((lane, li) => {
      if (lane.p !== lastProcess) {
        rows.push({ process: lane.p, y: y });
        y += PROCESS_H;
        lastProcess = lane.p;
      }
      rows.push({ lane: li, y: y });
      y += lane.rows * ROW_H + 4;
    });
    return { rows: rows, height: y + 4 };
  }

  function render() {
    const lay = layout();
    const plotW = width - LABEL_W;
    const span = view.t1 - view.t0;
    const X = (t) => LABEL_W + (t - view.t0) / span * plotW;
    svgRoot.setAttribute('height', lay.height);
    svgRoot.setAttribute('width', width);
    const g = svgEl('g');
    // Axis: about eight ticks, at round times.
    const step = Math.pow(10, Math.floor(Math.log10(span / 8)));
    const tickNs = [1, 2, 5, 10].map((m) => m * step).find((s) => span / s <= 10) || step * 10;
    for (let t = Math.ceil(view.t0 / tickNs) * tickNs; t <= view.t1; t += tickNs) {
      const x = X(t);
      g.append(svgEl('line', { class: 'tick', x1: x, x2: x, y1: AXIS_H - 4, y2: lay.height }));
      if (x > width - 50) continue;  // no room for its label
      const label = svgEl('text', { x: x + 2, y: 14 });
      label.textContent = tickLabel(t, view.t1);
      g.append(label);
    }
    for (const row of lay.rows) {
      if (row.process !== undefined) {
        const p = data.processes[row.process];
        const label = svgEl('text', { class: 'process-label', x: 4, y: row.y + 14 });
        label.textContent = p.name + ' (pid ' + p.pid + ')' + (p.cut_off === 'true' ? ' - cut off' : '');
        g.append(label);
        continue;
      }
      const lane = data.lanes[row.lane];
      const label = svgEl('text', { class: 'lane-label', x: 12, y: row.y + 12 });
      label.textContent = lane.owner + ' ' + lane.kind;
      g.append(label);
      drawLane(g, lane, row.lane, row.y, X);
    }
    g.append(svgEl('rect', { x: 0, y: 0, width: LABEL_W - 2, height: 1, fill: 'none' }));
    svgRoot.replaceChildren(g);
    describeView();
  }

  // What the timeline shows, above it: the view it opened on and why, the whole window, or a part.
  function describeView() {
    const whole = data.capture.window;
    const i = data.initial;
    let text;
    if (view.t0 <= 0 && view.t1 >= data.capture.window_ns) {
      text = 'Showing the whole ' + whole + '.';
    } else if (view.t0 === i.start_ns && view.t1 === i.end_ns && (i.step >= 0 || i.stretch)) {
      text = 'Showing ' + (i.step >= 0 ? 'step ' + i.step + ', the busiest (' + i.device + ' of device time in its ' +
        i.step_length + ')' : 'a stretch of ' + duration(i.end_ns - i.start_ns) + ', the busiest') +
        '; zoom out or press Whole window for the whole ' + whole + '.';
    } else {
      text = 'Showing ' + duration(view.t0) + ' to ' + duration(view.t1) + ' of ' + whole + '.';
    }
    document.getElementById('view-note').textContent = text;
  }

  function drawLane(g, lane, li, y, X) {
    const pending = [];  // per depth: sub-pixel slices merged into one mark
    const flush = (depth) => {
      const m = pending[depth];
      if (!m) return;
      const r = svgEl('rect', { class: 'agg', x: m.x0, y: y + depth * ROW_H + 1,
        width: Math.max(1, m.x1 - m.x0), height: ROW_H - 2 });
      const title = svgEl('title');
      title.textContent = m.count + ' slices too small to draw one by one at this zoom';
      r.append(title);
      g.append(r);
      pending[depth] = null;
    };
    const left = X(view.t0), right = X(view.t1);
    for (let i = 0; i < lane.s.length; i++) {
      const s = lane.s[i], e = s + lane.d[i];
      if (s > view.t1) break;
      if (e < view.t0) continue;
      const depth = lane.l[i];
      const x0 = Math.max(left, X(s)), x1 = Math.min(right, X(e));
      const gi = laneBase[li] + i;
      if (x1 - x0 < 1 && !(selection && selection.chain.has(gi))) {
        const m = pending[depth];
        if (m && x0 <= m.x1 + 1) {
          m.x1 = Math.max(m.x1, x0 + 1);
          m.count++;
        } else {
          flush(depth);
          pending[depth] = { x0: x0, x1: x0 + 1, count: 1 };
        }
        continue;
      }
      flush(depth);
      const name = data.names[lane.n[i]];
      let cls = 'slice';
      if (selection) {
        if (selection.index === gi) cls += ' selected';
        else if (selection.chain.has(gi)) cls += ' hl';
        else cls += ' dim';
      }
      const r = svgEl('rect', { class: cls, x: x0, y: y + depth * ROW_H + 1, width: Math.max(1.5, x1 - x0),
        height: ROW_H - 2, fill: colour(name), 'data-i': gi, 'data-name': name, 'data-kind': lane.kind });
      const title = svgEl('title');
      title.textContent = name + '  ' + duration(lane.d[i]) + (lane.a[i] ? '\n' + lane.a[i] : '');
      r.append(title);
      g.append(r);
      if (x1 - x0 > 40) {
        const text = svgEl('text', { class: 'slice-name', x: x0 + 3, y: y + depth * ROW_H + 12 });
        text.textContent = name.slice(0, Math.floor((x1 - x0 - 6) / 6.5));
        g.append(text);
      }
    }
    pending.forEach((m, depth) => flush(depth));
    if (lane.density.length > 0) {
      const bins = lane.density.length, binW = (X(data.capture.window_ns) - X(0)) / bins;
      for (let b = 0; b < bins; b++) {
        const start = data.capture.window_ns * b / bins;
        if (start + data.capture.window_ns / bins < data.drawn.until_ns || lane.density[b] === 0) continue;
        const x0 = Math.max(left, X(start)), x1 = Math.min(right, x0 + Math.max(binW, 1));
        if (x1 <= x0) continue;
        g.append(svgEl('rect', { class: 'density', x: x0, y: y + 1, width: x1 - x0, height: ROW_H - 2,
          opacity: 0.15 + 0.85 * lane.density[b] }));
      }
    }
  }

  // The chain of a slice: its flows (for a framework op, also those of the ops inside it), and
  // every slice those flows reach: the runtime calls and the device work they caused.
  function chainOf(gi) {
    const [li, i] = sliceLane[gi];
    const lane = data.lanes[li];
    const flows = new Set(sliceFlows.get(gi) || []);
    if (lane.kind === 'framework') {
      const end = lane.s[i] + lane.d[i];
      for (let j = i + 1; j < lane.s.length && lane.s[j] <= end; j++) {
        if (lane.l[j] > lane.l[i]) (sliceFlows.get(laneBase[li] + j) || []).forEach((f) => flows.add(f));
      }
    }
    const chain = new Set([gi]);
    for (const f of flows) for (const s of flowSlices.get(f) || []) chain.add(s);
    return chain;
  }

  function describe(gi) {
    const [li, i] = sliceLane[gi];
    const lane = data.lanes[li];
    return data.names[lane.n[i]] + '  ' + duration(lane.d[i]) + '  [' + lane.owner + ' ' + lane.kind + ']' +
      (lane.a[i] ? '  ' + lane.a[i] : '');
  }

  function showChain() {
    const panel = document.getElementById('chain');
    if (!selection) {
      panel.replaceChildren(el('span', { class: 'step' }, [
        'Click a framework op (or a runtime call, or an execution) to see its chain: the runtime calls it made ' +
        'and the device executions and transfers they caused.']));
      return;
    }
    const byKind = { framework: [], runtime: [], executions: [], DMA: [] };
    const ordered = Array.from(selection.chain).sort((a, b) => {
      const [la, ia] = sliceLane[a], [lb, ib] = sliceLane[b];
      return data.lanes[la].s[ia] - data.lanes[lb].s[ib];
    });
    for (const gi of ordered) byKind[data.lanes[sliceLane[gi][0]].kind].push(gi);
    const list = (title, items) => items.length === 0 ? [] : [
      el('div', { class: 'step' }, [title + ' (' + items.length + ')']),
      el('ol', {}, items.map((gi) => el('li', {}, [describe(gi)])))];
    panel.replaceChildren(el('strong', {}, ['Selected: ' + describe(selection.index)]),
      ...list('framework', byKind.framework.filter((gi) => gi !== selection.index)),
      ...list('runtime calls', byKind.runtime.filter((gi) => gi !== selection.index)),
      ...list('device executions', byKind.executions.filter((gi) => gi !== selection.index)),
      ...list('DMA', byKind.DMA.filter((gi) => gi !== selection.index)));
  }

  function select(gi) {
    selection = gi === null ? null : { index: gi, chain: chainOf(gi) };
    render();
    showChain();
  }

  // From the table: the first slice of that name, zoomed to and selected, its chain shown.
  function showFirst(name) {
    const n = data.names.indexOf(name);
    let best = null;
    data.lanes.forEach((lane, li) => {
      for (let i = 0; i < lane.s.length; i++) {
        if (lane.n[i] === n && (best === null || lane.s[i] < data.lanes[best[0]].s[best[1]])) best = [li, i];
      }
    });
    if (best === null) return;
    // The view: the op and all of its chain, with a margin.
    const gi = laneBase[best[0]] + best[1];
    let t0 = Infinity, t1 = -Infinity;
    for (const c of chainOf(gi)) {
      const [cl, ci] = sliceLane[c];
      t0 = Math.min(t0, data.lanes[cl].s[ci]);
      t1 = Math.max(t1, data.lanes[cl].s[ci] + data.lanes[cl].d[ci]);
    }
    const pad = Math.max((t1 - t0) * 0.15, 500);
    view.t0 = Math.max(0, t0 - pad);
    view.t1 = t1 + pad;
    select(gi);
    document.getElementById('timeline').scrollIntoView({ block: 'start' });
  }

  function zoom(factor, atNs) {
    const span = Math.max(100, (view.t1 - view.t0) * factor);
    const share = (atNs - view.t0) / (view.t1 - view.t0);
    view.t0 = Math.max(0, atNs - share * span);
    view.t1 = Math.min(Math.max(1, data.capture.window_ns), view.t0 + span);
    render();
  }

  function timeline() {
    app.append(el('h2', {}, ['Timeline']));
    indexSlices();
    const button = (text, id, onClick) => {
      const b = el('button', { id: id }, [text]);
      b.addEventListener('click', onClick);
      return b;
    };
    const mid = () => (view.t0 + view.t1) / 2;
    app.append(el('div', { class: 'toolbar' }, [
      button('Zoom in', 'zoom-in', () => zoom(0.5, mid())),
      button('Zoom out', 'zoom-out', () => zoom(2, mid())),
      button('Whole window', 'zoom-reset', () => { view.t0 = 0; view.t1 = Math.max(1, data.capture.window_ns); render(); }),
      el('span', { class: 'hint' }, ['Wheel: zoom at the pointer. Drag: pan. Click a slice: its chain (a name in the table: its first one). ' +
        'Double-click: zoom to it. Grey marks stand for slices too small to draw at this zoom.'])]));
    app.append(el('p', { class: 'view-note', id: 'view-note' }));
    const box = el('div', { id: 'timeline' });
    svgRoot = svgEl('svg', { xmlns: SVG });
    box.append(svgRoot);
    app.append(box, el('div', { id: 'chain' }));
    width = Math.max(800, box.clientWidth || 1000);
    // The page's scroll bar appears once everything is drawn, narrowing the box: drawn to the
    // first width, the end of the view would be cut off.
    new ResizeObserver(() => {
      const now = Math.max(800, box.clientWidth || 1000);
      if (now !== width) {
        width = now;
        render();
      }
    }).observe(box);
    const timeAt = (clientX) => {
      const rect = svgRoot.getBoundingClientRect();
      const x = Math.max(0, clientX - rect.left - LABEL_W);
      return view.t0 + x / (width - LABEL_W) * (view.t1 - view.t0);
    };
    svgRoot.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      zoom(ev.deltaY > 0 ? 1.25 : 0.8, timeAt(ev.clientX));
    }, { passive: false });
    let drag = null;
    svgRoot.addEventListener('mousedown', (ev) => { drag = { x: ev.clientX, t0: view.t0, t1: view.t1, moved: false }; });
    window.addEventListener('mousemove', (ev) => {
      if (!drag) return;
      const dx = ev.clientX - drag.x;
      if (Math.abs(dx) < 3 && !drag.moved) return;
      drag.moved = true;
      const shift = -dx / (width - LABEL_W) * (drag.t1 - drag.t0);
      const windowNs = Math.max(1, data.capture.window_ns);
      const clamped = Math.min(Math.max(shift, -drag.t0), windowNs - drag.t1);
      view.t0 = drag.t0 + clamped;
      view.t1 = drag.t1 + clamped;
      render();
    });
    window.addEventListener('mouseup', (ev) => {
      const wasDrag = drag && drag.moved;
      drag = null;
      if (wasDrag || !svgRoot.contains(ev.target)) return;
      const hit = ev.target.closest('[data-i]');
      select(hit ? Number(hit.getAttribute('data-i')) : null);
    });
    svgRoot.addEventListener('dblclick', (ev) => {
      const hit = ev.target.closest('[data-i]');
      if (!hit) return;
      const [li, i] = sliceLane[Number(hit.getAttribute('data-i'))];
      const lane = data.lanes[li];
      const pad = Math.max(lane.d[i] * 0.1, 50);
      view.t0 = Math.max(0, lane.s[i] - pad);
      view.t1 = lane.s[i] + lane.d[i] + pad;
      render();
    });
    render();
    showChain();
  }

  // ---- Per-core utilization; drops and cut-off processes ----
  // The columns in `wrapping` (sentences, lists) wrap within the page.
  function simpleTable(id, heads, rows, wrapping) {
    const attrs = (i) => (wrapping || []).includes(i) ? { class: 'wrap' } : {};
    return el('table', { id: id, class: 'simple' }, [
      el('thead', {}, [el('tr', {}, heads.map((h, i) => el('th', attrs(i), [h])))]),
      el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c, i) => el('td', attrs(i), [String(c)])))))]);
  }

  function cores() {
    app.append(el('h2', {}, ['NeuronCore utilization']));
    if (data.cores.length === 0) {
      app.append(el('p', {}, ['No device executions in this capture.']));
      return;
    }
    app.append(simpleTable('cores', ['Process', 'NeuronCore', 'Executions', 'Busy', 'Utilization of the window',
      'DMA busy'], data.cores.map((c) => [c.process, c.core, c.executions, c.busy, c.utilization, c.dma_busy])));
  }

  // ---- A distributed job: the collectives of most skew, the stragglers (nrtprof collectives) ----
  function collectives() {
    const c = data.collectives;
    if (!c) return;
    app.append(el('h2', { id: 'collectives-title' }, ['Collectives']));
    app.append(el('p', {}, [c.heading]));
    app.append(el('p', {}, ['The ' + c.worst.length + ' of ' + c.total +
      ' collectives with the most arrival skew, the most first (nrtprof collectives lists every one, in order):']));
    app.append(simpleTable('collectives', c.columns, c.worst, [7]));
    app.append(el('p', {}, [c.stragglers_heading]));
    app.append(simpleTable('stragglers', c.straggler_columns, c.stragglers, [6]));
    if (c.slowest) app.append(el('p', { id: 'slowest-rank', class: 'bad' }, [c.slowest]));
    for (const note of c.notes) app.append(el('p', { class: 'note' }, ['note: ' + note]));
  }

  function drops() {
    app.append(el('h2', {}, ['Drops and cut-off processes']));
    const cut = data.summary.cut_off_processes;
    app.append(el('p', { id: 'drops-verdict', class: data.summary.drops_total === 0 && cut === 0 ? 'ok' : 'bad' }, [
      'Events dropped: ' + data.summary.drops_total + '; processes cut off: ' + cut +
      (data.summary.drops_total === 0 && cut === 0 ? ' (the capture is whole)' : ' (the capture is not whole: see below)')]));
    app.append(simpleTable('processes', ['pid', 'Executable', 'Host', 'Events', 'Dropped', 'by reason', 'Cut off',
      'Batches missing', 'Uncorrelated device events', 'Not recorded'],
    data.processes.map((p) => [p.pid, p.name, p.host, p.events, p.drops_total, p.drops.join(', ') || '-',
      p.cut_off === 'true' ? 'yes: its last events are missing' : 'no', p.batches_missing, p.uncorrelated,
      p.notices.join('; ') || '-']), [5, 9]));
  }

  header();
  chart();
  table();
  flame();
  collectives();
  timeline();
  cores();
  drops();
  document.body.setAttribute('data-report', 'ready');
})();
