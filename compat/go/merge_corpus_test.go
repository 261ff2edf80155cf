package compat

// The merge engine's differential corpus through pgx in its default extended protocol
// (QueryExecModeCacheStatement: each query prepared once under a name and reused), with
// the literals as parameters (Go strings, sent as text, typed by the server). compat/run
// sets COMPAT_CORPUS (the queries of `cargo run -p merge --example corpus_export`),
// COMPAT_CORPUS_REFERENCE_URL (a database holding every row) and COMPAT_CORPUS_URL (pgvia's
// database sharded over four clusters, or the reference itself when run directly). Results
// compare as the Rust corpus compares them: column names and type OIDs, then the raw cells
// (binary for the types pgx reads in binary) in order when the query orders completely, as
// multisets otherwise; floats of the variance family to a relative 1e-9; or the SQLSTATE.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type corpusQuery struct {
	SQL     string    `json:"sql"`
	Params  []*string `json:"params"`
	Compare string    `json:"compare"`
}

type corpusResult struct {
	sqlstate string
	message  string
	columns  []string
	rows     [][][]byte
	values   [][]any
}

func runCorpus(ctx context.Context, conn *pgx.Conn, q corpusQuery) corpusResult {
	args := make([]any, len(q.Params))
	for i, p := range q.Params {
		if p == nil {
			args[i] = nil
		} else {
			args[i] = *p
		}
	}
	rows, err := conn.Query(ctx, q.SQL, args...)
	if err != nil {
		return corpusResult{sqlstate: sqlstateOf(err), message: err.Error()}
	}
	defer rows.Close()
	var out corpusResult
	for _, f := range rows.FieldDescriptions() {
		out.columns = append(out.columns, fmt.Sprintf("%s:%d", f.Name, f.DataTypeOID))
	}
	for rows.Next() {
		raw := rows.RawValues()
		row := make([][]byte, len(raw))
		for i, c := range raw {
			if c != nil {
				row[i] = append([]byte{}, c...)
			}
		}
		out.rows = append(out.rows, row)
		if q.Compare == "approx" {
			v, err := rows.Values()
			if err != nil {
				return corpusResult{sqlstate: "decode: " + err.Error()}
			}
			out.values = append(out.values, v)
		}
	}
	if err := rows.Err(); err != nil {
		return corpusResult{sqlstate: sqlstateOf(err), message: err.Error()}
	}
	return out
}

func sqlstateOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return "client: " + err.Error()
}

func rowKey(r [][]byte) string {
	var b strings.Builder
	for _, c := range r {
		if c == nil {
			b.WriteString("N|")
		} else {
			fmt.Fprintf(&b, "%x|", c)
		}
	}
	return b.String()
}

func closeValues(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, xok := a[i].(float64)
		y, yok := b[i].(float64)
		if xok && yok {
			if x != y && math.Abs(x-y) > 1e-9*math.Max(math.Abs(x), math.Abs(y)) {
				return false
			}
		} else if fmt.Sprint(a[i]) != fmt.Sprint(b[i]) {
			return false
		}
	}
	return true
}

func sameCorpus(want, got corpusResult, compare string) bool {
	if want.sqlstate != "" || got.sqlstate != "" {
		return want.sqlstate == got.sqlstate
	}
	if strings.Join(want.columns, ",") != strings.Join(got.columns, ",") {
		return false
	}
	if len(want.rows) != len(got.rows) {
		return false
	}
	switch compare {
	case "count":
		return true
	case "approx":
		for i := range want.values {
			if !closeValues(want.values[i], got.values[i]) {
				return false
			}
		}
		return true
	}
	a := make([]string, len(want.rows))
	b := make([]string, len(got.rows))
	for i := range want.rows {
		a[i], b[i] = rowKey(want.rows[i]), rowKey(got.rows[i])
	}
	if compare == "unordered" {
		sort.Strings(a)
		sort.Strings(b)
	}
	for i := range a {
		if !bytes.Equal([]byte(a[i]), []byte(b[i])) {
			return false
		}
	}
	return true
}

func connectCorpus(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["TimeZone"] = "UTC"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func TestMergeCorpusWithParameters(t *testing.T) {
	path := os.Getenv("COMPAT_CORPUS")
	if path == "" {
		t.Skip("COMPAT_CORPUS is not set (compat/run sets it)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var corpus []corpusQuery
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 5*time.Minute)
	reference := connectCorpus(t, ctx, os.Getenv("COMPAT_CORPUS_REFERENCE_URL"))
	target := connectCorpus(t, ctx, os.Getenv("COMPAT_CORPUS_URL"))
	var failures []string
	withParams, answered := 0, 0
	for _, q := range corpus {
		if len(q.Params) > 0 {
			withParams++
		}
		want := runCorpus(ctx, reference, q)
		if want.sqlstate == "" {
			answered++
		}
		// Twice: the second execution reuses the statement pgx cached.
		for run := 1; run <= 2; run++ {
			got := runCorpus(ctx, target, q)
			if !sameCorpus(want, got, q.Compare) {
				failures = append(failures, fmt.Sprintf("run %d: %s %v\n  reference: %s %v %d rows\n  got: %s %s %v %d rows",
					run, q.SQL, q.Params, want.sqlstate, want.columns, len(want.rows), got.sqlstate, got.message, got.columns, len(got.rows)))
			}
		}
	}
	t.Logf("%d queries (%d with parameters, %d answered with rows), %d differ", len(corpus), withParams, answered, len(failures))
	if withParams < 100 {
		t.Errorf("only %d queries with parameters", withParams)
	}
	if len(failures) > 0 {
		if len(failures) > 20 {
			failures = failures[:20]
		}
		t.Fatalf("differ:\n%s", strings.Join(failures, "\n"))
	}
}
