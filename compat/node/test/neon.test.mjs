// Neon's serverless driver (@neondatabase/serverless) and Drizzle's neon-http adapter,
// pointed at pgvia's gateway: neon() over HTTP (POST /sql, including transaction([...]))
// and Pool over WebSocket (/v2) with an interactive transaction. Only through pgvia: these
// clients speak to a gateway, not to PostgreSQL, so the direct run has no such tests.
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { test } from 'node:test'

import { neon, neonConfig, Pool } from '@neondatabase/serverless'
import { drizzle } from 'drizzle-orm/neon-http'
import { eq } from 'drizzle-orm'
import { integer, pgTable, text, jsonb } from 'drizzle-orm/pg-core'
import ws from 'ws'

import { env } from '../lib/env.mjs'

const gateway = process.env.COMPAT_GATEWAY
const viaPgvia = process.env.COMPAT_TARGET === 'pgvia' && gateway

if (viaPgvia) {
  // Where the driver finds pgvia: everything else stays at the driver's defaults.
  neonConfig.fetchEndpoint = () => `http://${gateway}/sql`
  neonConfig.webSocketConstructor = ws
  neonConfig.wsProxy = () => `${gateway}/v2`
  neonConfig.useSecureWebSocket = false
  // The compat user logs in with SCRAM, which cannot take a pipelined cleartext password.
  neonConfig.pipelineConnect = false

  test('neon: http queries, parameters and types', async () => {
    const sql = neon(env.url)
    await sql`DROP TABLE IF EXISTS neon_items`
    await sql`CREATE TABLE neon_items (id int PRIMARY KEY, name text, tags text[], doc jsonb, big int8, at timestamptz)`
    const inserted = await sql.query(
      'INSERT INTO neon_items VALUES ($1, $2, $3, $4, $5, $6), ($7, $8, NULL, NULL, NULL, NULL) RETURNING id',
      [1, "it's", ['a', 'b,c'], JSON.stringify({ k: [1, 2] }), '9007199254740993', new Date('2024-01-02T03:04:05Z'), 2, 'two'],
    )
    assert.deepEqual(inserted, [{ id: 1 }, { id: 2 }])
    const rows = await sql`SELECT * FROM neon_items WHERE id = ${1}`
    assert.equal(rows[0].name, "it's")
    assert.deepEqual(rows[0].tags, ['a', 'b,c'])
    assert.deepEqual(rows[0].doc, { k: [1, 2] })
    assert.equal(rows[0].big, '9007199254740993')
    assert.equal(rows[0].at.toISOString(), '2024-01-02T03:04:05.000Z')
    const full = await sql.query('SELECT id FROM neon_items ORDER BY id', [], { fullResults: true, arrayMode: true })
    assert.deepEqual(full.rows, [[1], [2]])
    assert.equal(full.rowCount, 2)
    assert.equal(full.fields[0].name, 'id')
    await assert.rejects(sql`SELECT 1 / ${0}::int`, { code: '22012' })
    await assert.rejects(sql`INSERT INTO neon_items (id) VALUES (1)`, { code: '23505', constraint: 'neon_items_pkey' })
  })

  test('neon: transaction([...]) commits together or not at all', async () => {
    const sql = neon(env.url)
    await sql`DROP TABLE IF EXISTS neon_tx`
    await sql`CREATE TABLE neon_tx (id int PRIMARY KEY)`
    const [, counted] = await sql.transaction([sql`INSERT INTO neon_tx VALUES (1), (2)`, sql`SELECT count(*)::int AS n FROM neon_tx`], {
      isolationLevel: 'Serializable',
    })
    assert.equal(counted[0].n, 2)
    await assert.rejects(sql.transaction([sql`INSERT INTO neon_tx VALUES (3)`, sql`INSERT INTO neon_tx VALUES (1)`]), { code: '23505' })
    const [{ n }] = await sql`SELECT count(*)::int AS n FROM neon_tx`
    assert.equal(n, 2)
  })

  test('neon: an error after rows rejects, never resolves with the rows before it', async () => {
    const sql = neon(env.url)
    // Fails at its third row: PostgreSQL's 22012, not two rows.
    await assert.rejects(sql`SELECT 10 / (3 - g) AS x FROM generate_series(1, 5) g`, { code: '22012' })
    // Past the gateway's JSON buffer (compat/run sets json_buffer_bytes = 65536) the answer
    // streams with 200; failing then, it is broken off, so the driver rejects.
    await assert.rejects(sql`SELECT g, repeat('x', 100) AS pad, 10 / (20000 - g) AS x FROM generate_series(1, 30000) g`)
    const [{ ok }] = await sql`SELECT 1 AS ok`
    assert.equal(ok, 1)
  })

  test('neon: a transaction([...]) larger than the JSON buffer streams, whole or not at all', async () => {
    const sql = neon(env.url)
    await sql`DROP TABLE IF EXISTS neon_big`
    await sql`CREATE TABLE neon_big (id int)`
    const big = () => sql`SELECT g, md5(g::text) AS h FROM generate_series(1, 20000) g`
    const [, rows] = await sql.transaction([sql`INSERT INTO neon_big VALUES (1)`, big()])
    assert.equal(rows.length, 20000)
    const md5 = (s) => createHash('md5').update(s).digest('hex')
    assert.deepEqual(rows[0], { g: 1, h: md5('1') })
    assert.deepEqual(rows[19999], { g: 20000, h: md5('20000') })
    // Failing after more than the buffer went: rejected, and nothing of it committed.
    await assert.rejects(sql.transaction([sql`INSERT INTO neon_big VALUES (2)`, big(), sql`SELECT 1 / 0`]))
    const [{ n }] = await sql`SELECT count(*)::int AS n FROM neon_big`
    assert.equal(n, 1)
  })

  test('neon: Pool over WebSocket with an interactive transaction', async () => {
    const pool = new Pool({ connectionString: env.url })
    const client = await pool.connect()
    try {
      await client.query('DROP TABLE IF EXISTS neon_ws; CREATE TABLE neon_ws (id int)')
      await client.query('BEGIN')
      await client.query('INSERT INTO neon_ws VALUES ($1)', [7])
      const other = await pool.query('SELECT count(*)::int AS n FROM neon_ws')
      assert.equal(other.rows[0].n, 0)
      await client.query('COMMIT')
      const after = await pool.query('SELECT count(*)::int AS n FROM neon_ws')
      assert.equal(after.rows[0].n, 1)
      await assert.rejects(client.query('SELECT 1 / 0'), { code: '22012' })
    } finally {
      client.release()
      await pool.end()
    }
  })

  test('drizzle: neon-http schema, inserts, selects and a failing statement', async () => {
    const sql = neon(env.url)
    await sql`DROP TABLE IF EXISTS drizzle_users`
    await sql`CREATE TABLE drizzle_users (id integer PRIMARY KEY, name text NOT NULL, meta jsonb)`
    const users = pgTable('drizzle_users', { id: integer('id').primaryKey(), name: text('name').notNull(), meta: jsonb('meta') })
    const db = drizzle({ client: sql })
    await db.insert(users).values([
      { id: 1, name: 'ada', meta: { langs: ['en'] } },
      { id: 2, name: 'grace', meta: null },
    ])
    const found = await db.select().from(users).where(eq(users.id, 1))
    assert.deepEqual(found, [{ id: 1, name: 'ada', meta: { langs: ['en'] } }])
    const all = await db.select({ name: users.name }).from(users).orderBy(users.id)
    assert.deepEqual(all, [{ name: 'ada' }, { name: 'grace' }])
    await assert.rejects(db.insert(users).values({ id: 1, name: 'again' }), (e) => {
      const code = e.code ?? e.cause?.code
      assert.equal(code, '23505')
      return true
    })
  })
}
