'use strict';
// Per-call overhead of Node.js resilience libraries, measured in the same run
// as libresil's C benchmarks (scripts/bench.sh) so that the ratios compare
// figures taken on the same machine at the same time.
//
// Method: each case awaits its call once per iteration, sequentially, so the
// figure is the full per-call cost a caller pays, promise machinery included.
// Each case is warmed up (so the JIT has optimised the path), then calibrated
// to an iteration count that takes at least MIN_RUN_NS, then run RUNS times;
// the reported figure is the median of the runs' ns per call. Time comes from
// process.hrtime.bigint() (monotonic, nanoseconds).
//
// Output: one JSON document on stdout; progress lines on stderr.
// Usage: node bench.js [--runs N] [--min-run-ms N]

const fs = require('node:fs');
const path = require('node:path');
const os = require('node:os');

const CircuitBreaker = require('opossum');
const cockatiel = require('cockatiel');

function argValue(name, dflt) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) return dflt;
  const v = Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name}: expected a positive number`);
  return v;
}

const RUNS = argValue('--runs', 7);
const MIN_RUN_NS = BigInt(Math.round(argValue('--min-run-ms', 200) * 1e6));
const WARMUP_NS = 300000000n;

// Results are stored here so the calls cannot be dropped as dead code.
let sink = 0;

function packageVersion(name) {
  // Walk up from the resolved entry point to the package's own package.json;
  // a package's "exports" map may not expose package.json to require().
  let dir = path.dirname(require.resolve(name));
  for (;;) {
    const f = path.join(dir, 'package.json');
    if (fs.existsSync(f)) {
      const pkg = JSON.parse(fs.readFileSync(f, 'utf8'));
      if (pkg.name === name) return pkg.version;
    }
    const up = path.dirname(dir);
    if (up === dir) return 'unknown';
    dir = up;
  }
}

async function loop(call, iters) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < iters; i++) sink ^= await call();
  return process.hrtime.bigint() - t0;
}

async function measure(c) {
  process.stderr.write(`node: ${c.name} ...`);
  // Warm-up, which also estimates the cost of one call.
  let iters = 1000;
  let warmed = 0n;
  let done = 0;
  while (warmed < WARMUP_NS) {
    warmed += await loop(c.call, iters);
    done += iters;
    if (iters < 1000000) iters *= 2;
  }
  const estimate = Number(warmed) / done;
  const perRun = Math.max(1000, Math.ceil(Number(MIN_RUN_NS) / estimate));
  const runs = [];
  for (let r = 0; r < RUNS; r++) {
    const ns = await loop(c.call, perRun);
    runs.push(Number(ns) / perRun);
  }
  const sorted = [...runs].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)];
  process.stderr.write(` ${median.toFixed(1)} ns/call\n`);
  return {
    name: c.name,
    library: c.library,
    version: c.library === 'node' ? process.version : packageVersion(c.library),
    measures: c.measures,
    comparable: c.comparable,
    peer: c.peer,
    ns_per_call: median,
    runs,
    iterations_per_run: perRun,
  };
}

async function main() {
  const value = 42;
  const noop = async () => value;
  const noopSync = () => value;

  const opossumNoTimer = new CircuitBreaker(noop, { timeout: false });
  const opossumDefault = new CircuitBreaker(noop);

  const { circuitBreaker, ConsecutiveBreaker, handleAll, retry, bulkhead, wrap } = cockatiel;
  const cockBreaker = circuitBreaker(handleAll, {
    halfOpenAfter: 10000,
    breaker: new ConsecutiveBreaker(5),
  });
  const cockWrap = wrap(
    retry(handleAll, { maxAttempts: 3 }),
    circuitBreaker(handleAll, { halfOpenAfter: 10000, breaker: new ConsecutiveBreaker(5) }),
    bulkhead(25),
  );

  const cases = [
    {
      name: 'node_await_baseline',
      library: 'node',
      peer: false,
      comparable: null,
      measures: 'await of an async no-op with no library: the floor any promise-based policy pays (reference, not a peer)',
      call: () => noop(),
    },
    {
      name: 'opossum_fire',
      library: 'opossum',
      peer: true,
      comparable: 'breaker_run',
      measures: 'await breaker.fire() of an async no-op, CLOSED, options {timeout: false} (breaker only, no per-call timer; rolling stats on as by default)',
      call: () => opossumNoTimer.fire(),
    },
    {
      name: 'opossum_fire_default',
      library: 'opossum',
      peer: true,
      comparable: 'breaker_run',
      measures: 'await breaker.fire() of an async no-op, CLOSED, default options (includes the 10 s per-call timeout timer opossum arms by default)',
      call: () => opossumDefault.fire(),
    },
    {
      name: 'cockatiel_breaker_execute',
      library: 'cockatiel',
      peer: true,
      comparable: 'breaker_run',
      measures: 'await circuitBreaker(handleAll, {halfOpenAfter: 10 s, ConsecutiveBreaker(5)}).execute(() => 42), CLOSED',
      call: () => cockBreaker.execute(noopSync),
    },
    {
      name: 'cockatiel_wrap_retry_breaker_bulkhead',
      library: 'cockatiel',
      peer: true,
      comparable: 'chain4_run',
      measures: 'await wrap(retry(handleAll, {maxAttempts: 3}), circuitBreaker(ConsecutiveBreaker(5)), bulkhead(25)).execute(() => 42), no failures (cockatiel has no rate limiter, so one layer fewer than chain4_run)',
      call: () => cockWrap.execute(noopSync),
    },
  ];

  const results = [];
  for (const c of cases) results.push(await measure(c));

  opossumNoTimer.shutdown();
  opossumDefault.shutdown();

  const out = {
    tool: 'bench/node_peers/bench.js',
    node: process.version,
    v8: process.versions.v8,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    method: `each call awaited sequentially; warm-up ${Number(WARMUP_NS) / 1e6} ms, then ${RUNS} runs of at least ${Number(MIN_RUN_NS) / 1e6} ms each (fixed iteration count per run); figure = median ns per call; timer process.hrtime.bigint()`,
    cases: results,
    sink,
  };
  process.stdout.write(JSON.stringify(out, null, 2) + '\n');
}

main().catch((e) => {
  process.stderr.write(`node peers failed: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
