// DSH's published JSONL session backend (@deepseek-ai/dsh-session-persistence-jsonl) driven from the tests: one JSON
// request per line on stdin, one JSON answer per line on stdout. Each request names a DSH root; the backend is made
// for it afresh (its config is per root), used, and disposed.
//
//   {"op":"write","root":R,"compression":"zstd","log":PATH,"id":ID?}
//       -> {ok, path, frames}: the raw DSH log at PATH (its header line, then storage records, packed rows
//          expanded by DSH's own decoder) written through DSH's own write path: create, then one durable append
//          per turn (each turn/end closes a batch); with ID, under that id instead of the header's
//   {"op":"locate","root":R,"compression":"zstd","meta":{header line}}
//       -> {ok, path}: where the backend keeps (or looks for) that session's file
//   {"op":"load","root":R,"compression":"zstd","id":ID}
//       -> {ok, list, meta, events, raw}: list() of the root, load(id) (recovery and the store's seed checks
//          included), and readRaw(id)'s logical text
//   any failure -> {ok: false, error: {name, message}}
import { Context } from '@deepseek-ai/cordis'
import Invariants from '@deepseek-ai/dsh-invariants'
import SessionStore, { decodeStorageRecord } from '@deepseek-ai/dsh-session'
import * as SessionInvariant from '@deepseek-ai/dsh-session/invariant'
import JsonlSessionPersistence from '@deepseek-ai/dsh-session-persistence-jsonl'
import { readFileSync } from 'node:fs'
import { createInterface } from 'node:readline'

async function backendAt(root, compression) {
  const ctx = new Context()
  await ctx.plugin(Invariants)
  await ctx.plugin(SessionStore)
  await ctx.plugin(SessionInvariant)
  await ctx.plugin(JsonlSessionPersistence, { root, compression })
  const persistence = await new Promise((resolve) => ctx.inject(['sessionPersistence'], (c) => resolve(c.sessionPersistence)))
  return { ctx, persistence }
}

function readRawLog(path) {
  const [first, ...records] = readFileSync(path, 'utf8').split('\n').filter((line) => line !== '')
  const { type, ...header } = JSON.parse(first)
  const meta = { ...header, delegationDepth: header.delegationDepth ?? 0 }
  const batches = [[]]
  for (const record of records) {
    for (const event of decodeStorageRecord(JSON.parse(record))) {
      batches.at(-1).push(event)
      if (event.type === 'turn/end') batches.push([])
    }
  }
  return { meta, batches: batches.filter((batch) => batch.length > 0) }
}

async function answer(request) {
  const { ctx, persistence } = await backendAt(request.root, request.compression ?? 'zstd')
  try {
    if (request.op === 'write') {
      const { meta, batches } = readRawLog(request.log)
      if (request.id !== undefined) meta.id = request.id
      await persistence.create(meta)
      for (const batch of batches) await persistence.append(meta.id, batch)
      return { ok: true, path: persistence.locate(meta).path, batches: batches.length }
    }
    if (request.op === 'locate') {
      const { type, ...meta } = request.meta
      return { ok: true, path: persistence.locate(meta).path }
    }
    if (request.op === 'load') {
      const list = (await persistence.list()).map((header) => header.id).sort()
      const loaded = await persistence.load(request.id)
      const raw = await persistence.readRaw(request.id)
      return { ok: true, list, meta: loaded.meta, events: loaded.events, raw: raw.content }
    }
    throw new Error(`unknown op ${request.op}`)
  } finally {
    await ctx.dispose?.()
  }
}

const lines = createInterface({ input: process.stdin })
for await (const line of lines) {
  if (!line.trim()) continue
  let out
  try {
    out = await answer(JSON.parse(line))
  } catch (error) {
    out = { ok: false, error: { name: error?.name, message: String(error?.message ?? error) } }
  }
  process.stdout.write(JSON.stringify(out) + '\n')
}
process.exit(0)
