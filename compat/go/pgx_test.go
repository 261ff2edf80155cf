package compat

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgx's default: every query is prepared once under a name derived from its text
// (stmtcache_<hash>) and then run with Bind/Execute.
func TestCacheStatementDefault(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	conn := connect(t, ctx)
	if conn.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		t.Fatalf("default exec mode is %v, the suite expects QueryExecModeCacheStatement", conn.Config().DefaultQueryExecMode)
	}
	for i := 0; i < 30; i++ {
		var n int64
		var s string
		if err := conn.QueryRow(ctx, "SELECT $1::int8 * 2, $2::text", i, fmt.Sprint("v", i)).Scan(&n, &s); err != nil {
			t.Fatal(err)
		}
		if n != int64(i*2) || s != fmt.Sprint("v", i) {
			t.Fatalf("got %d %q", n, s)
		}
	}
	// An explicitly prepared statement under a name of the application's choosing.
	if _, err := conn.Prepare(ctx, "compat_go_named", "SELECT $1::int + 1"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		var n int
		if err := conn.QueryRow(ctx, "compat_go_named", i).Scan(&n); err != nil || n != i+1 {
			t.Fatalf("named statement: %d, %v", n, err)
		}
	}
	if err := conn.Deallocate(ctx, "compat_go_named"); err != nil {
		t.Fatal(err)
	}
}

func TestExecModes(t *testing.T) {
	modes := map[string]pgx.QueryExecMode{
		"cache_statement": pgx.QueryExecModeCacheStatement,
		"cache_describe":  pgx.QueryExecModeCacheDescribe,
		"describe_exec":   pgx.QueryExecModeDescribeExec,
		"exec":            pgx.QueryExecModeExec,
		"simple_protocol": pgx.QueryExecModeSimpleProtocol,
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			conn := connectMode(t, ctx, mode)
			for i := 0; i < 12; i++ {
				var n int64
				var s string
				var b bool
				var arr []int32
				err := conn.QueryRow(ctx, "SELECT $1::int8 + 1, $2::text || '!', $3::bool, $4::int4[]",
					int64(i), "it's", i%2 == 0, []int32{1, int32(i)}).Scan(&n, &s, &b, &arr)
				if err != nil {
					t.Fatal(err)
				}
				if n != int64(i+1) || s != "it's!" || b != (i%2 == 0) || len(arr) != 2 || arr[1] != int32(i) {
					t.Fatalf("got %d %q %v %v", n, s, b, arr)
				}
			}
			rows, err := conn.Query(ctx, "SELECT g FROM generate_series(1, $1::int) g", 100)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil || len(got) != 100 || got[99] != 100 {
				t.Fatalf("collect: %v, %d rows", err, len(got))
			}
			_, err = conn.Exec(ctx, "SELECT 1 / $1::int", 0)
			if sqlState(err) != "22012" {
				t.Fatalf("want division_by_zero, got %v", err)
			}
			var one int
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("after error: %v", err)
			}
		})
	}
}

func TestSendBatchWithError(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	conn := connect(t, ctx)
	freshTable(t, ctx, conn, "go_batch", "n int")

	b := &pgx.Batch{}
	b.Queue("INSERT INTO go_batch VALUES ($1)", 1)
	b.Queue("SELECT $1::int * 10", 4)
	b.Queue("SELECT 1 / $1::int", 0)
	b.Queue("INSERT INTO go_batch VALUES ($1)", 2)
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		t.Fatalf("first insert: %v", err)
	}
	var forty int
	if err := br.QueryRow().Scan(&forty); err != nil || forty != 40 {
		t.Fatalf("second: %d %v", forty, err)
	}
	if _, err := br.Exec(); sqlState(err) != "22012" {
		t.Fatalf("third: want division_by_zero, got %v", err)
	}
	if _, err := br.Exec(); err == nil {
		t.Fatal("fourth: the server skips statements after an error until Sync")
	}
	if err := br.Close(); err == nil {
		t.Fatal("Close should report the batch's error")
	}
	// The whole batch was one implicit transaction: nothing stayed.
	var count int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM go_batch").Scan(&count); err != nil || count != 0 {
		t.Fatalf("rows after failed batch: %d, %v", count, err)
	}

	// A batch that succeeds, twice, so its statements come from pgx's cache the second time.
	for round := 0; round < 2; round++ {
		b = &pgx.Batch{}
		for i := 0; i < 50; i++ {
			b.Queue("INSERT INTO go_batch VALUES ($1)", i)
		}
		b.Queue("SELECT count(*) FROM go_batch")
		br = conn.SendBatch(ctx, b)
		for i := 0; i < 50; i++ {
			if _, err := br.Exec(); err != nil {
				t.Fatal(err)
			}
		}
		if err := br.QueryRow().Scan(&count); err != nil || count != 50*(round+1) {
			t.Fatalf("count %d %v", count, err)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCopyFrom(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	conn := connect(t, ctx)
	freshTable(t, ctx, conn, "go_copy", "id int, label text, at timestamptz")
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"go_copy"}, []string{"id", "label", "at"},
		pgx.CopyFromSlice(10000, func(i int) ([]any, error) {
			return []any{i, fmt.Sprint("label ", i), base.Add(time.Duration(i) * time.Second)}, nil
		}))
	if err != nil || n != 10000 {
		t.Fatalf("CopyFrom: %d %v", n, err)
	}
	var count, sum int64
	var last time.Time
	if err := conn.QueryRow(ctx, "SELECT count(*), sum(id), max(at) FROM go_copy").Scan(&count, &sum, &last); err != nil {
		t.Fatal(err)
	}
	if count != 10000 || sum != 9999*10000/2 || !last.Equal(base.Add(9999*time.Second)) {
		t.Fatalf("got %d %d %v", count, sum, last)
	}
	// A failing COPY (a NOT NULL violation) leaves nothing behind and the connection usable.
	mustExec(t, ctx, conn, "ALTER TABLE go_copy ALTER COLUMN label SET NOT NULL")
	_, err = conn.CopyFrom(ctx, pgx.Identifier{"go_copy"}, []string{"id", "label"},
		pgx.CopyFromRows([][]any{{1, "a"}, {2, nil}}))
	if sqlState(err) != "23502" {
		t.Fatalf("want not_null_violation, got %v", err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM go_copy").Scan(&count); err != nil || count != 10000 {
		t.Fatalf("after failed COPY: %d %v", count, err)
	}
}

func TestPgconnPipeline(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	conn := connect(t, ctx)
	pc := conn.PgConn()
	p := pc.StartPipeline(ctx)
	p.SendPrepare("compat_go_pipe", "SELECT $1::int * 7", nil)
	p.SendQueryPrepared("compat_go_pipe", [][]byte{[]byte("6")}, nil, nil)
	p.SendQueryParams("SELECT $1::text || 'x'", [][]byte{[]byte("a")}, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	p.SendQueryPrepared("compat_go_pipe", [][]byte{[]byte("3")}, nil, nil)
	p.SendQueryParams("SELECT 1 / 0", nil, nil, nil, nil)
	p.SendQueryParams("SELECT 'skipped'", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	p.SendQueryPrepared("compat_go_pipe", [][]byte{[]byte("1")}, nil, nil)
	p.SendDeallocate("compat_go_pipe")
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}

	text := func() string {
		t.Helper()
		res, err := p.GetResults()
		if err != nil {
			t.Fatalf("GetResults: %v", err)
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			t.Fatalf("want a result reader, got %T", res)
		}
		r := rr.Read()
		if r.Err != nil || len(r.Rows) != 1 {
			t.Fatalf("result: %v, %d rows", r.Err, len(r.Rows))
		}
		return string(r.Rows[0][0])
	}
	sync := func() {
		t.Helper()
		res, err := p.GetResults()
		if _, ok := res.(*pgconn.PipelineSync); !ok || err != nil {
			t.Fatalf("want PipelineSync, got %T %v", res, err)
		}
	}
	if res, err := p.GetResults(); err != nil {
		t.Fatal(err)
	} else if _, ok := res.(*pgconn.StatementDescription); !ok {
		t.Fatalf("want a statement description, got %T", res)
	}
	if got := text(); got != "42" {
		t.Fatalf("got %s", got)
	}
	if got := text(); got != "ax" {
		t.Fatalf("got %s", got)
	}
	sync()
	if got := text(); got != "21" {
		t.Fatalf("got %s", got)
	}
	res, err := p.GetResults()
	if err == nil {
		if rr, ok := res.(*pgconn.ResultReader); ok {
			err = rr.Read().Err
		}
	}
	if sqlState(err) != "22012" {
		t.Fatalf("want division_by_zero, got %T %v", res, err)
	}
	// The statement after the error was skipped; the pipeline resumes after the Sync.
	for {
		res, err = p.GetResults()
		if _, ok := res.(*pgconn.PipelineSync); ok {
			break
		}
		if res == nil && err == nil {
			t.Fatal("pipeline ended before its second sync")
		}
	}
	if got := text(); got != "7" {
		t.Fatalf("got %s", got)
	}
	if res, err := p.GetResults(); err != nil {
		t.Fatalf("deallocate: %v", err)
	} else if _, ok := res.(*pgconn.CloseComplete); !ok {
		t.Fatalf("want CloseComplete, got %T", res)
	}
	sync()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT 5").Scan(&n); err != nil || n != 5 {
		t.Fatalf("after pipeline: %v", err)
	}
}

func TestListenWaitForNotification(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	listener := connect(t, ctx)
	sender := connect(t, ctx)
	mustExec(t, ctx, listener, "LISTEN go_channel")
	for i := 0; i < 3; i++ {
		mustExec(t, ctx, sender, "SELECT pg_notify('go_channel', $1)", fmt.Sprint("payload ", i))
	}
	for i := 0; i < 3; i++ {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listener.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("notification %d: %v", i, err)
		}
		if n.Channel != "go_channel" || n.Payload != fmt.Sprint("payload ", i) {
			t.Fatalf("got %+v", n)
		}
	}
	mustExec(t, ctx, listener, "UNLISTEN go_channel")
}

func TestContextCancel(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	conn := connect(t, ctx)
	qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	started := time.Now()
	_, err := conn.Exec(qctx, "SELECT pg_sleep(20) /* go cancel */")
	if err == nil {
		t.Fatal("query outlived its context")
	}
	if time.Since(started) > 10*time.Second {
		t.Fatalf("cancel took %v", time.Since(started))
	}
	if !errors.Is(err, context.DeadlineExceeded) && sqlState(err) != "57014" {
		t.Fatalf("want a deadline or query_canceled error, got %v", err)
	}
	// pgx sent a CancelRequest: the server must stop the query, not run it to the end.
	watcher := connect(t, ctx)
	deadline := time.Now().Add(5 * time.Second)
	for {
		var running int
		err := watcher.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%go cancel */' AND pid <> pg_backend_pid()").Scan(&running)
		if err != nil {
			t.Fatal(err)
		}
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cancelled query is still running on the server")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !conn.IsClosed() {
		var n int
		if err := conn.QueryRow(ctx, "SELECT 6").Scan(&n); err != nil || n != 6 {
			t.Fatalf("connection after cancel: %v", err)
		}
	}
}

func TestStress50ClientsPool3(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	setup := connect(t, ctx)
	freshTable(t, ctx, setup, "go_stress", "client int, n int")
	clients := envInt("COMPAT_STRESS_CLIENTS", 50)
	seconds := envInt("COMPAT_STRESS_SECONDS", 10)
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)

	var wg sync.WaitGroup
	failures := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(cid int) {
			defer wg.Done()
			if err := stressClient(ctx, url(t), cid, deadline); err != nil {
				failures <- fmt.Errorf("client %d: %w", cid, err)
			}
		}(c)
	}
	wg.Wait()
	close(failures)
	var errs []error
	for err := range failures {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		t.Fatalf("%d clients failed, first: %v", len(errs), errs[0])
	}
}

func stressClient(ctx context.Context, u string, cid int, deadline time.Time) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewSource(int64(cid)))
	inserted := 0
	ops := 0
	for time.Now().Before(deadline) {
		switch rng.Intn(4) {
		case 0:
			v := rng.Int63n(1_000_000)
			var got int64
			if err := conn.QueryRow(ctx, "SELECT $1::int8 * 2", v).Scan(&got); err != nil || got != v*2 {
				return fmt.Errorf("double %d: got %d, %v", v, got, err)
			}
		case 1:
			n := rng.Intn(50) + 1
			var count, sum int64
			if err := conn.QueryRow(ctx, "SELECT count(*), sum(g) FROM generate_series(1, $1::int) g", n).Scan(&count, &sum); err != nil ||
				count != int64(n) || sum != int64(n*(n+1)/2) {
				return fmt.Errorf("series %d: %d %d %v", n, count, sum, err)
			}
		case 2:
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO go_stress VALUES ($1, $2)", cid, inserted); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			var count int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM go_stress WHERE client = $1", cid).Scan(&count); err != nil || count != inserted+1 {
				_ = tx.Rollback(ctx)
				return fmt.Errorf("count in tx: %d, %v", count, err)
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			inserted++
		default:
			b := &pgx.Batch{}
			for i := 0; i < 5; i++ {
				b.Queue("SELECT $1::text || $2::int", fmt.Sprint("c", cid, "-"), i)
			}
			br := conn.SendBatch(ctx, b)
			for i := 0; i < 5; i++ {
				var s string
				if err := br.QueryRow().Scan(&s); err != nil || s != fmt.Sprint("c", cid, "-", i) {
					_ = br.Close()
					return fmt.Errorf("batch %d: %q %v", i, s, err)
				}
			}
			if err := br.Close(); err != nil {
				return err
			}
		}
		ops++
	}
	var count int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM go_stress WHERE client = $1", cid).Scan(&count); err != nil || count != inserted {
		return fmt.Errorf("final count %d, want %d: %v", count, inserted, err)
	}
	if ops == 0 {
		return errors.New("no work done")
	}
	return nil
}
