// Where a test file's CPU goes, by process (docs/development.md, "Test suite time").
//
// As a hook, in every Node process of a run (vitest, its workers, and every `wavegate` command, worker,
// gateway and agent the tests start): appends the process's command line and its CPU seconds to
// $WAVEGATE_CPU_LOG when it ends (at exit, or at SIGTERM/SIGINT, which end most of them).
//   WAVEGATE_CPU_LOG=/tmp/cpu.jsonl NODE_OPTIONS="--require $PWD/scripts/cpu-by-process.cjs" npx vitest run <file>
// Then the sum by command, largest first:
//   node scripts/cpu-by-process.cjs /tmp/cpu.jsonl
// A process killed with SIGKILL writes nothing; nor do the Temporal server, sshd or shell commands (not Node):
// /usr/bin/time around the run counts them all.
const { appendFileSync, readFileSync } = require('node:fs');

function record(log) {
  let done = false;
  const write = (how) => {
    if (done) return;
    done = true;
    const usage = process.resourceUsage();
    const argv = process.argv.slice(1, 4).map((a) => a.replace(`${process.cwd()}/`, ''));
    const cpu = (usage.userCPUTime + usage.systemCPUTime) / 1e6;
    try {
      appendFileSync(log, `${JSON.stringify({ pid: process.pid, how, argv, cpu })}\n`);
    } catch {
      // The log is a measurement aid: never fail the process over it.
    }
  };
  process.on('exit', () => write('exit'));
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.prependListener(signal, () => {
      write(signal);
      // Alone, this listener would keep the process alive: end it as the signal would have.
      if (process.listenerCount(signal) === 1) process.exit(128 + (signal === 'SIGTERM' ? 15 : 2));
    });
  }
}

function summary(file) {
  const byCommand = new Map();
  for (const line of readFileSync(file, 'utf8').split('\n').filter(Boolean)) {
    const { argv, cpu } = JSON.parse(line);
    const wavegate = argv[0]?.endsWith('wavegate.js') || argv[0]?.endsWith('bin/wavegate');
    const key = wavegate ? `wavegate ${argv.slice(1, 3).join(' ')}` : argv.map((a) => a.split('/').pop()).join(' ');
    const entry = byCommand.get(key) ?? { count: 0, cpu: 0 };
    entry.count += 1;
    entry.cpu += cpu;
    byCommand.set(key, entry);
  }
  const rows = [...byCommand].sort((a, b) => b[1].cpu - a[1].cpu);
  for (const [key, { count, cpu }] of rows) console.log(`${cpu.toFixed(1).padStart(7)} s ${String(count).padStart(4)}x  ${key}`);
  console.log(`${rows.reduce((s, [, e]) => s + e.cpu, 0).toFixed(1).padStart(7)} s in all`);
}

if (require.main === module) summary(process.argv[2]);
else if (process.env.WAVEGATE_CPU_LOG) record(process.env.WAVEGATE_CPU_LOG);
