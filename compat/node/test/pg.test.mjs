// node-postgres (pg) at its default settings, with pg-cursor and pg-copy-streams.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'

import pg from 'pg'
import Cursor from 'pg-cursor'
import copyStreams from 'pg-copy-streams'

import { env, freshTableSql, randomFor } from '../lib/env.mjs'

async function withClient(fn) {
  const client = new pg.Client({ connectionString: env.url })
  await client.connect()
  try {
    return await fn(client)
  } finally {
    await client.end()
  }
}

test('pg: simple queries and parameters', () =>
  withClient(async (c) => {
    // Without values pg sends a simple Query: several statements in one string work.
    const results = await c.query('SELECT 1 AS a; SELECT 2 AS b')
    assert.deepEqual(results.map((r) => r.rows[0]), [{ a: 1 }, { b: 2 }])
    // With values: the unnamed statement, Parse/Bind/Describe/Execute/Sync.
    const r = await c.query('SELECT $1::int + 1 AS n, $2::text AS t, $3::bool AS b, $4::int[] AS arr, $5::bytea AS raw', [
      41,
      "it's",
      true,
      [1, 2],
      Buffer.from([0, 255]),
    ])
    assert.deepEqual(r.rows[0], { n: 42, t: "it's", b: true, arr: [1, 2], raw: Buffer.from([0, 255]) })
    await assert.rejects(c.query('SELECT 1 / $1::int', [0]), { code: '22012' })
    assert.equal((await c.query('SELECT $1::text AS x', ['after'])).rows[0].x, 'after')
  }))

test('pg: named prepared statement', () =>
  withClient(async (c) => {
    for (let i = 0; i < 20; i++) {
      const r = await c.query({ name: 'compat_node_double', text: 'SELECT $1::int * 2 AS n', values: [i] })
      assert.equal(r.rows[0].n, i * 2)
    }
  }))

test('pg: transactions', () =>
  withClient(async (c) => {
    await c.query(freshTableSql('node_pg_tx', 'n int'))
    await c.query('BEGIN')
    await c.query('INSERT INTO node_pg_tx VALUES ($1)', [1])
    await c.query('SAVEPOINT s')
    await c.query('INSERT INTO node_pg_tx VALUES ($1)', [2])
    await c.query('ROLLBACK TO SAVEPOINT s')
    await c.query('COMMIT')
    await c.query('BEGIN')
    await c.query('INSERT INTO node_pg_tx VALUES ($1)', [3])
    await assert.rejects(c.query('SELECT 1 / 0'), { code: '22012' })
    await assert.rejects(c.query('SELECT 1'), { code: '25P02' })
    await c.query('ROLLBACK')
    assert.deepEqual((await c.query('SELECT n FROM node_pg_tx ORDER BY n')).rows, [{ n: 1 }])
  }))

test('pg-cursor: portal suspension with row limits', () =>
  withClient(async (c) => {
    // Outside a transaction: pg-cursor sends Parse/Bind/Describe/Execute(100)/Flush and no
    // Sync until it is closed, so the portal stays open between reads.
    const cursor = c.query(new Cursor('SELECT g, g * g AS sq FROM generate_series(1, $1::int) g', [1050]))
    let seen = 0
    for (;;) {
      const rows = await cursor.read(100)
      if (rows.length === 0) break
      assert.ok(rows.length <= 100)
      for (const row of rows) {
        seen += 1
        assert.equal(row.g, seen)
        assert.equal(row.sq, seen * seen)
      }
    }
    assert.equal(seen, 1050)
    await cursor.close()
    // Two cursors interleaved inside one transaction.
    await c.query('BEGIN')
    const a = c.query(new Cursor('SELECT g FROM generate_series(1, 30) g'))
    const first = await a.read(10)
    await a.close()
    const b = c.query(new Cursor('SELECT g FROM generate_series(100, 130) g'))
    const second = await b.read(10)
    await b.close()
    await c.query('COMMIT')
    assert.deepEqual(first.map((r) => r.g), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert.equal(second[9].g, 109)
    // A cursor whose query fails midway.
    const bad = c.query(new Cursor('SELECT 10 / (5 - g) FROM generate_series(1, 10) g'))
    await assert.rejects(bad.read(100), { code: '22012' })
    assert.equal((await c.query('SELECT 7 AS n')).rows[0].n, 7)
  }))

test('pg-copy-streams: COPY FROM STDIN and COPY TO STDOUT', () =>
  withClient(async (c) => {
    await c.query(freshTableSql('node_pg_copy', 'id int PRIMARY KEY, label text'))
    const lines = []
    for (let i = 0; i < 10000; i++) lines.push(`${i}\tlabel ${i}\n`)
    const input = lines.join('')
    await pipeline(Readable.from([input.slice(0, 1000), input.slice(1000)]), c.query(copyStreams.from('COPY node_pg_copy FROM STDIN')))
    assert.equal((await c.query('SELECT count(*)::int AS n FROM node_pg_copy')).rows[0].n, 10000)

    const chunks = []
    await pipeline(
      c.query(copyStreams.to('COPY (SELECT id, label FROM node_pg_copy ORDER BY id) TO STDOUT')),
      new Writable({
        write(chunk, _enc, done) {
          chunks.push(chunk)
          done()
        },
      }),
    )
    assert.equal(Buffer.concat(chunks).toString(), input)

    // A duplicate key in the middle of the stream fails the COPY, and the client goes on.
    await assert.rejects(
      pipeline(Readable.from(['20000\tnew\n', '5\tduplicate\n']), c.query(copyStreams.from('COPY node_pg_copy FROM STDIN'))),
      { code: '23505' },
    )
    assert.equal((await c.query('SELECT count(*)::int AS n FROM node_pg_copy')).rows[0].n, 10000)
  }))

test('pg: LISTEN/NOTIFY', () =>
  withClient((listener) =>
    withClient(async (sender) => {
      const got = []
      const all = new Promise((resolve) => {
        listener.on('notification', (n) => {
          got.push(n.payload)
          if (got.length === 3) resolve()
        })
      })
      await listener.query('LISTEN node_channel')
      for (let i = 0; i < 3; i++) await sender.query("SELECT pg_notify('node_channel', $1)", [`payload ${i}`])
      await Promise.race([all, new Promise((_, reject) => setTimeout(() => reject(new Error(`got only ${got}`)), 10000))])
      assert.deepEqual(got, ['payload 0', 'payload 1', 'payload 2'])
      await listener.query('UNLISTEN node_channel')
    }),
  ))

test('pg: statement_timeout cancels on the server', () =>
  withClient(async (c) => {
    await c.query("SET statement_timeout = '200ms'")
    const started = Date.now()
    await assert.rejects(c.query('SELECT pg_sleep(5)'), { code: '57014' })
    assert.ok(Date.now() - started < 4000)
    assert.equal((await c.query('SELECT 8 AS n')).rows[0].n, 8)
  }))

test('pg: 50 concurrent clients through a pool of 3 for 10 s of mixed work', async () => {
  await withClient((c) => c.query(freshTableSql('node_pg_stress', 'client int, n int')))
  const deadline = Date.now() + env.stressSeconds * 1000
  const failures = []
  const client = async (cid) => {
    const rnd = randomFor(cid)
    let inserted = 0
    let ops = 0
    await withClient(async (c) => {
      while (Date.now() < deadline) {
        const k = Math.floor(rnd() * 4)
        if (k === 0) {
          const v = Math.floor(rnd() * 1e6)
          assert.equal((await c.query('SELECT $1::int8 * 2 AS n', [v])).rows[0].n, String(v * 2))
        } else if (k === 1) {
          await c.query('BEGIN')
          await c.query('INSERT INTO node_pg_stress VALUES ($1, $2)', [cid, inserted])
          const r = await c.query('SELECT count(*)::int AS n FROM node_pg_stress WHERE client = $1', [cid])
          assert.equal(r.rows[0].n, inserted + 1)
          await c.query('COMMIT')
          inserted += 1
        } else if (k === 2) {
          const cursor = c.query(new Cursor('SELECT g FROM generate_series(1, $1::int) g', [25]))
          const rows = [...(await cursor.read(10)), ...(await cursor.read(10)), ...(await cursor.read(10))]
          await cursor.close()
          assert.deepEqual(rows.map((r) => r.g), Array.from({ length: 25 }, (_, i) => i + 1))
        } else {
          const n = 1 + Math.floor(rnd() * 50)
          const r = await c.query('SELECT count(*)::int AS c, sum(g)::int AS s FROM generate_series(1, $1::int) g', [n])
          assert.deepEqual(r.rows[0], { c: n, s: (n * (n + 1)) / 2 })
        }
        ops += 1
      }
      const r = await c.query('SELECT count(*)::int AS n FROM node_pg_stress WHERE client = $1', [cid])
      assert.equal(r.rows[0].n, inserted)
      assert.ok(ops > 0)
    })
  }
  await Promise.all(
    Array.from({ length: env.stressClients }, (_, cid) => client(cid).catch((e) => failures.push(`client ${cid}: ${e.message}`))),
  )
  assert.deepEqual(failures.slice(0, 3), [], `${failures.length} clients failed`)
})
