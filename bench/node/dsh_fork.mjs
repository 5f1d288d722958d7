// Times DSH's own in-memory fork: node bench/node/dsh_fork.mjs <install dir> <session.jsonl> <runs>
//
// The published store (@deepseek-ai/dsh-session with its invariant companion, set up as the DSH oracle sets it
// up) creates a session from the file's events as a seed, then forks it at its last turn/end, `runs` times.
// Only create() and fork() are timed (performance.now()); process start and reading/parsing the file are not.
// Each child lives in its own fiber, disposed after the fork, so the children do not pile up in memory.
// Prints one JSON line: {events, load_ms, create_ms, fork_ms: [...]}.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'

const [installDir, file, runsArg] = process.argv.slice(2)
const require = createRequire(`${installDir}/package.json`)
const load = (name) => import(pathToFileURL(require.resolve(name)).href)
const { Context } = await load('@deepseek-ai/cordis')
const Invariants = (await load('@deepseek-ai/dsh-invariants')).default
const SessionInvariant = await load('@deepseek-ai/dsh-session/invariant')
const { default: SessionStore, SessionId } = await load('@deepseek-ai/dsh-session')

const ctx = new Context()
await ctx.plugin(Invariants)
await ctx.plugin(SessionStore)
await ctx.plugin(SessionInvariant)

let started = performance.now()
const text = readFileSync(file, 'utf8')
const seed = []
let at = text.indexOf('\n') + 1 // skip the header line
while (at < text.length) {
  const end = text.indexOf('\n', at)
  const stop = end < 0 ? text.length : end
  if (stop > at) seed.push(JSON.parse(text.slice(at, stop)))
  at = stop + 1
}
const loadMs = performance.now() - started
let boundary = seed.length - 1
while (boundary >= 0 && seed[boundary].type !== 'turn/end') boundary--

started = performance.now()
const source = ctx.sessions.create(SessionId('bench-source'), { seed })
const createMs = performance.now() - started

const forkMs = []
for (let r = 0; r < Number(runsArg ?? 3); r++) {
  let elapsed
  const fiber = ctx.plugin({
    inject: ['sessions'],
    apply: (sub) => {
      const t0 = performance.now()
      const child = sub.sessions.fork(source, boundary, SessionId(`bench-child-${r}`))
      elapsed = performance.now() - t0
      if (child.events.length < boundary + 1) throw new Error('short child')
    },
  })
  await fiber
  forkMs.push(elapsed)
  await fiber.dispose()
}
process.stdout.write(`${JSON.stringify({ events: seed.length, load_ms: loadMs, create_ms: createMs, fork_ms: forkMs })}\n`)
process.exit(0)
