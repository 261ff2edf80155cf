//! The seed corpora (see `src/bin/fuzz-seeds.rs`): real messages per target.

use bytes::BytesMut;
use wire::build;

use crate::split::join;

/// Every target's seeds.
pub fn all() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    vec![
        ("frontend", frontend()),
        ("backend", backend()),
        ("startup", startup()),
        ("scram_server", scram_server()),
        ("scram_client", scram_client()),
        ("config", config()),
        ("analyze", sql()),
        ("shape", sql()),
        ("tracker", tracker()),
    ]
}

fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    build::frame(&mut b, tag, |b| b.extend_from_slice(body));
    b.to_vec()
}

/// A knob byte (decoder limit, chunk size) then frames.
fn stream(knob: u8, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut s = vec![knob];
    frames.iter().for_each(|f| s.extend_from_slice(f));
    s
}

fn be32(n: i32) -> [u8; 4] {
    n.to_be_bytes()
}

fn frontend() -> Vec<Vec<u8>> {
    let parse = frame(b'P', b"s1\0SELECT $1::int, $2\0\0\x02\0\0\0\x17\0\0\0\x19");
    let bind = frame(
        b'B',
        &[&b"p1\0s1\0\0\x01\0\x01\0\x02"[..], &be32(4), b"\0\0\0\x2a", &be32(-1), b"\0\x01\0\0"].concat(),
    );
    let describe_s = frame(b'D', b"Ss1\0");
    let describe_p = frame(b'D', b"Pp1\0");
    let execute = frame(b'E', b"p1\0\0\0\0\0");
    let sync = frame(b'S', b"");
    let close = frame(b'C', b"Ss1\0");
    let query = frame(b'Q', b"SELECT 1; BEGIN; COMMIT\0");
    let fcall = frame(b'F', &[&be32(1598)[..], b"\0\x01\0\0\0\x01", &be32(3), b"abc", b"\0\0"].concat());
    let copy = [frame(b'd', b"1\tone\n"), frame(b'c', b""), frame(b'f', b"client gave up\0")];
    let mut seeds = vec![
        stream(0, std::slice::from_ref(&query)),
        stream(0, &[parse.clone(), bind.clone(), describe_p.clone(), execute.clone(), sync.clone()]),
        stream(0x30, &[parse.clone(), describe_s.clone(), sync.clone(), close.clone(), sync.clone()]),
        stream(0x02, std::slice::from_ref(&bind)),
        stream(0x01, &[query.clone(), query.clone()]),
        stream(0, std::slice::from_ref(&fcall)),
        stream(0, &[frame(b'H', b""), frame(b'X', b"")]),
        stream(0, &[frame(b'p', b"secret\0")]),
        stream(0xf0, &copy),
        stream(0, &[frame(b'Q', b"\0")]),
        stream(0, &[frame(b'E', b"\0\0\0\0\x64")]),
        // Lengths that lie: short, negative, too long for the limit.
        vec![0, b'Q', 0, 0, 0, 3],
        vec![0, b'S', 0xff, 0xff, 0xff, 0xff],
        vec![0x01, b'Q', 0, 0, 1, 0, b'x'],
        stream(0, &[frame(b'B', b"\0\0\0\x01\0\x05\0\x01\xff\xff\xff\xfe\0\0")]),
    ];
    for f in [&parse, &bind, &describe_s, &describe_p, &execute, &close, &query, &fcall] {
        seeds.push(stream(0x50, std::slice::from_ref(f)));
        // The same message cut short by one byte inside its declared length.
        let mut cut = f.clone();
        cut.pop();
        let len = (cut.len() - 1) as i32;
        cut[1..5].copy_from_slice(&len.to_be_bytes());
        seeds.push(stream(0, &[cut]));
    }
    seeds
}

fn backend() -> Vec<Vec<u8>> {
    let mut b = BytesMut::new();
    build::authentication_ok(&mut b);
    build::authentication_cleartext_password(&mut b);
    build::authentication_md5_password(&mut b, *b"salt");
    build::authentication_sasl(&mut b, &["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]);
    build::authentication_sasl_continue(&mut b, b"r=abc,s=c2FsdA==,i=4096");
    build::authentication_sasl_final(&mut b, b"v=c2lnbmF0dXJlIHNpZ25hdHVyZSBzaWduYXR1cmUgISE=");
    let auth = b.to_vec();
    let mut b = BytesMut::new();
    build::parameter_status(&mut b, "server_version", "15.8");
    build::parameter_status(&mut b, "client_encoding", "UTF8");
    build::backend_key_data(&mut b, 4242, b"\x01\x02\x03\x04");
    build::ready_for_query(&mut b, b'I');
    let login = b.to_vec();
    let mut err = BytesMut::new();
    build::ErrorFields::error(wire::sqlstate::SqlState::PROTOCOL_VIOLATION, "bad message")
        .with_detail("d")
        .with_hint("h")
        .write(&mut err);
    let row_description = frame(
        b'T',
        &[
            &b"\0\x02id\0"[..],
            &be32(16384),
            b"\0\x01",
            &be32(23),
            b"\0\x04",
            &be32(-1),
            b"\0\0",
            b"name\0",
            &be32(0),
            b"\0\0",
            &be32(25),
            b"\xff\xff",
            &be32(-1),
            b"\0\x01",
        ]
        .concat(),
    );
    let data_row = frame(b'D', &[&b"\0\x02"[..], &be32(2), b"42", &be32(-1)].concat());
    let reply = [
        frame(b'1', b""),
        frame(b'2', b""),
        frame(b't', &[&b"\0\x02"[..], &be32(23), &be32(25)].concat()),
        row_description.clone(),
        data_row.clone(),
        frame(b'C', b"SELECT 1\0"),
        frame(b'Z', b"T"),
    ];
    let mut seeds = vec![
        stream(0, std::slice::from_ref(&auth)),
        stream(0, std::slice::from_ref(&login)),
        stream(0, &reply),
        stream(0x70, &reply),
        stream(0, &[err.to_vec(), frame(b'Z', b"E")]),
        stream(0, &[frame(b'N', b"SWARNING\0VWARNING\0C01000\0Mnote\0\0")]),
        stream(0, &[frame(b'A', &[&be32(77)[..], b"channel\0payload\0"].concat())]),
        stream(
            0,
            &[frame(b'G', b"\0\0\x02\0\0\0\0"), frame(b'H', b"\x01\0\x01\0\x01"), frame(b'W', b"\0\0\0")],
        ),
        stream(0, &[frame(b'd', b"row\n"), frame(b'c', b""), frame(b'C', b"COPY 1\0")]),
        stream(0, &[frame(b'n', b""), frame(b'3', b""), frame(b's', b""), frame(b'I', b"")]),
        stream(0, &[frame(b'V', &[&be32(3)[..], b"abc"].concat()), frame(b'V', &be32(-1))]),
        stream(0, &[frame(b'v', &[&be32(2)[..], &be32(1), b"_pq_.x\0"].concat())]),
        stream(0, &[frame(b'K', &[&be32(1)[..], &[7u8; 32]].concat())]),
        stream(0, &[frame(b'E', b"SFATAL\0VFATAL\0C57P01\0Mterminating connection\0\0")]),
        stream(0, &[frame(b'Z', b"X")]),
    ];
    for f in reply.iter().chain([&row_description, &data_row]) {
        seeds.push(stream(0x03, std::slice::from_ref(f)));
    }
    seeds
}

fn startup() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    let params: &[&[(&str, &str)]] = &[
        &[("user", "app"), ("database", "db")],
        &[("user", "app"), ("database", "db"), ("application_name", "psql"), ("client_encoding", "UTF8")],
        &[("user", "app"), ("options", "-c search_path=app,public --statement_timeout=5s")],
        &[("user", "app"), ("options", r"-c application_name=a\ b -c x=y\\z")],
        &[("user", "app"), ("_pq_.command_line", "1"), ("replication", "database")],
        &[("user", "")],
    ];
    for p in params {
        let mut b = BytesMut::new();
        // The seeds are valid parameters, which the builder always writes.
        let _ = build::startup_message(&mut b, p.iter().copied());
        seeds.push(b.to_vec());
    }
    let mut b = BytesMut::new();
    build::ssl_request(&mut b);
    let _ = build::startup_message(&mut b, [("user", "app")]);
    seeds.push(b.to_vec());
    let mut b = BytesMut::new();
    build::cancel_request(&mut b, 1234, b"\x01\x02\x03\x04");
    seeds.push(b.to_vec());
    let mut b = BytesMut::new();
    build::cancel_request(&mut b, 1234, &[9u8; 32]);
    seeds.push(b.to_vec());
    // GSSENCRequest, protocol 3.2, and an unknown version.
    seeds.push([&be32(8)[..], &80_877_104u32.to_be_bytes()].concat());
    seeds.push([&be32(21)[..], &0x0003_0002u32.to_be_bytes(), b"user\0app\0\0"].concat());
    seeds.push([&be32(21)[..], &0x0002_0000u32.to_be_bytes(), b"user\0app\0\0"].concat());
    seeds.push([&be32(16)[..], &0x0003_0000u32.to_be_bytes(), b"user\0app"].concat());
    seeds.push(be32(4).to_vec());
    seeds
}

fn sasl_initial(data: &[u8]) -> Vec<u8> {
    [&b"SCRAM-SHA-256\0"[..], &be32(data.len() as i32), data].concat()
}

fn scram_server() -> Vec<Vec<u8>> {
    let recorded = crate::scram::recorded_exchange();
    let parts: Vec<&[u8]> = recorded[1..].split(|&b| b == crate::split::SEPARATOR).collect();
    let (first, last) = (parts[0], parts[1]);
    let mut seeds = vec![recorded.clone()];
    let firsts: &[&[u8]] = &[
        b"n,,n=,r=rOprNGfwEbeRWgbNEkqO",
        b"y,,n=user,r=abc",
        b"p=tls-server-end-point,,n=,r=abc",
        b"n,a=admin,n=,r=abc",
        b"n,,m=ext,n=,r=abc",
        b"n,,n=,r=abc,x=ext",
        b"n,,n=,r=",
        b"n,,n=,r=a\x01b",
    ];
    for f in firsts {
        seeds.push([&[0u8][..], &join(&[f, last])].concat());
    }
    let finals: &[&[u8]] = &[b"c=biws,r=wrong,p=AAAA", b"c=eSws,r=x,p=AAAA", b"c=biws", b"r=abc,p=AAAA"];
    for f in finals {
        seeds.push([&[0u8][..], &join(&[first, f])].concat());
    }
    // The same exchange through pgvia's authenticator (its nonce is random: the proof fails).
    for mode in [1u8, 2] {
        seeds.push([&[mode][..], &join(&[&sasl_initial(first), last])].concat());
        seeds.push([&[mode][..], &join(&[b"SCRAM-SHA-256\0\xff\xff\xff\xff", first, last])].concat());
        seeds.push([&[mode][..], &join(&[b"PLAIN\0\0\0\0\x01x", last])].concat());
    }
    seeds.push(vec![3, b'm', b'd', b'5', b'0', 0]);
    seeds.push([&[3u8][..], b"md5a3556571e93b0d20722ba62be61e8c2d\0"].concat());
    seeds.push([&[3u8][..], &join(&[b"md5\0", b"again\0"])].concat());
    seeds
}

fn scram_client() -> Vec<Vec<u8>> {
    let sasl = [&be32(10)[..], b"SCRAM-SHA-256\0\0"].concat();
    let sasl_plus = [&be32(10)[..], b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0"].concat();
    let first = [&be32(11)[..], b"r={N}c2VydmVyLW5vbmNl,s=cGd2aWEtZnV6ei1zYWx0IQ==,i=4096"].concat();
    let first_low = [&be32(11)[..], b"r={N}x,s=c2FsdA==,i=1"].concat();
    let fin = [&be32(12)[..], b"v=c2lnbmF0dXJlIHNpZ25hdHVyZSBzaWduYXR1cmUgISE="].concat();
    let fin_err = [&be32(12)[..], b"e=invalid-proof"].concat();
    let ok = be32(0).to_vec();
    let md5 = [&be32(5)[..], b"salt"].concat();
    let clear = be32(3).to_vec();
    let gss = be32(7).to_vec();
    let plain = [&be32(10)[..], b"PLAIN\0\0"].concat();
    let bad_final = [&be32(12)[..], b"v=AAAA"].concat();
    let seqs: Vec<Vec<&[u8]>> = vec![
        vec![&sasl, &first, &fin, &ok],
        vec![&sasl_plus, &first_low, &fin_err],
        vec![&sasl, &first_low, &ok],
        vec![&sasl, &ok],
        vec![&md5, &ok],
        vec![&clear, &ok],
        vec![&ok],
        vec![&ok, &ok],
        vec![&md5, &md5],
        vec![&gss],
        vec![&plain],
        vec![&sasl, b"\0\0\0\x0br=nope,s=c2FsdA==,i=4096"],
        vec![&sasl, &first, &bad_final],
    ];
    seqs.iter().map(|s| join(s)).collect()
}

fn config() -> Vec<Vec<u8>> {
    let texts: &[&str] = &[
        include_str!("../../../examples/pgvia.toml"),
        "[[databases]]\nname = \"app\"\nhost = \"127.0.0.1\"\nport = 5432\n\n[[users]]\nname = \"app\"\npassword = \"secret\"\n",
        "[general]\nlisten_port = 0\nauth_method = \"md5\"\n[[users]]\nname = \"u\"\npassword = \"md5a3556571e93b0d20722ba62be61e8c2d\"\n",
        "[[databases]]\nname = \"*\"\nhost = \"db\"\n[[users]]\nname = \"u\"\npassword = \"SCRAM-SHA-256$4096:c2FsdA==$AAAA:BBBB\"\n",
        "[pool]\npool_mode = \"statement\"\npool_size = 0\nmin_idle = 5\nidle_timeout = \"1x\"\n",
        "[analysis]\nmax_nesting = 5\ncache_entries = 1\ncache_bytes = 10\nwrite_functions = [\"a.b.c\"]\n",
        "[[databases]]\nname = \"app\"\nservers = [{ host = \"a\", role = \"primary\" }, { host = \"b\", role = \"replica\", weight = 0 }]\nread_write_split = \"auto\"\nload_balance = \"weighted\"\n",
        "[[databases]]\nname = \"pgvia\"\n[[databases]]\nname = \"app\"\n[[databases]]\nname = \"app\"\n",
        "[general]\ntls_mode = \"require\"\ntls_cert_file = \"missing.crt\"\nunknown = 1\n",
        "[general\n",
        "general = 5\n",
        "[[users]]\nname = \"u\\nv\"\npassword = \"MD5A3556571E93B0D20722BA62BE61E8C2D\"\npool_size = 4294967295\n",
        "[general]\nmax_message_size = 4294967295\nshutdown_timeout = \"18446744073709551615s\"\nslow_query_threshold = \"-1ms\"\n",
    ];
    texts.iter().map(|t| t.as_bytes().to_vec()).collect()
}

fn sql() -> Vec<Vec<u8>> {
    let texts: &[&str] = &[
        "SELECT 1",
        "SELECT * FROM accounts WHERE id = 42 AND name = 'bob'",
        "UPDATE accounts SET balance = balance - 10.5 WHERE id = $1",
        "INSERT INTO t (a, b) VALUES (1, 'x'), (2, E'y\\n') RETURNING a",
        "DELETE FROM t WHERE a IN (1, 2, 3) OR b = ANY('{1,2}')",
        "BEGIN; SELECT nextval('s'); COMMIT",
        "SET search_path = app, public; SELECT 1",
        "SET LOCAL statement_timeout = '5s'",
        "SELECT pg_advisory_lock(1)",
        "WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x",
        "SELECT * FROM t FOR UPDATE SKIP LOCKED",
        "PREPARE p AS SELECT $1; EXECUTE p(1); DEALLOCATE p",
        "LISTEN chan; NOTIFY chan, 'x'",
        "COPY t FROM STDIN",
        "COPY (SELECT 1) TO STDOUT",
        "CREATE TEMP TABLE tt (a int)",
        "/* pgvia: role=replica */ SELECT 1",
        "-- comment\nSELECT $$dollar 'quoted'$$, $tag$x$tag$, U&'\\0041', B'101', X'ff', 1e10, .5, 0x1F",
        "SELECT \"quoted \"\"ident\", DATE '2026-01-01', INTERVAL '1 day', 'a' 'b'",
        "SELECT 1 /* unterminated",
        "SELECT 'unterminated",
        "SELECT ((((((((((1))))))))))",
        "SELECT CASE WHEN a > 1 THEN 'x' ELSE 'y' END FROM t WHERE (a, b) = (1, 2)",
        "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1",
        "EXPLAIN ANALYZE DELETE FROM t",
        "VACUUM t; ANALYZE t",
        "DISCARD ALL",
        "RESET ALL",
        "SELECT set_config('a.b', 'c', false)",
        "START TRANSACTION ISOLATION LEVEL SERIALIZABLE READ ONLY",
        "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
        "SELECT 12abc",
        "select * from t where a = -1 and b = +2.5e-3 and c = 'é'",
        "",
        ";;;",
    ];
    texts.iter().map(|t| t.as_bytes().to_vec()).collect()
}

/// Script bytes for the tracker target (see `tracker::step`).
mod script {
    pub const fn query(action: u8) -> u8 {
        action << 5
    }
    pub const fn execute(action: u8) -> u8 {
        3 | action << 5
    }
    pub const PARSE: u8 = 6 | 1 << 5;
    pub const PARSE_FAILS: u8 = 6;
    pub const BIND: u8 = 7 | 1 << 5;
    pub const BIND_FAILS: u8 = 7;
    pub const DESCRIBE_S: u8 = 8 | 1 << 5;
    pub const DESCRIBE_P: u8 = 9 | 1 << 5;
    pub const CLOSE: u8 = 10 | 1 << 5;
    pub const SYNC: u8 = 11;
    pub const FLUSH: u8 = 13;
    pub const CALL: u8 = 14 | 1 << 5;
    pub const DELIVER_ONE: u8 = 15;
    pub const DELIVER_ALL: u8 = 28;
    pub const NOTICE: u8 = 30;
    /// In a copy tail: CopyData, CopyDone, CopyFail, Sync.
    pub const DATA: u8 = 0;
    pub const DONE: u8 = 2;
    pub const FAIL: u8 = 3;
    pub const TAIL_SYNC: u8 = 4;
    // Actions (see tracker::ACTIONS).
    pub const OK: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const BEGIN: u8 = 2;
    pub const COMMIT: u8 = 3;
    pub const COPY_IN: u8 = 4;
    pub const COPY_OUT: u8 = 5;
    pub const EMPTY: u8 = 6;
    pub const SUSPEND: u8 = 7;
}

fn tracker() -> Vec<Vec<u8>> {
    use script::*;
    let ext = |a| vec![PARSE, BIND, DESCRIBE_P, execute(a), SYNC];
    let mut seeds = vec![
        vec![query(OK), DELIVER_ALL],
        vec![query(OK), query(ERROR), query(OK), DELIVER_ONE, DELIVER_ONE, DELIVER_ALL],
        vec![query(BEGIN), DELIVER_ALL, query(ERROR), DELIVER_ALL, query(OK), query(COMMIT), DELIVER_ALL],
        vec![query(COPY_IN), DELIVER_ALL, DATA, DATA, DONE, DELIVER_ALL],
        vec![query(COPY_IN), DATA, DONE, query(OK), DELIVER_ALL],
        vec![query(COPY_IN), DELIVER_ALL, FAIL, DELIVER_ALL],
        vec![query(BEGIN), query(ERROR), query(COPY_IN), DONE, DELIVER_ALL, query(COMMIT)],
        vec![query(COPY_OUT), NOTICE, DELIVER_ALL],
        vec![query(EMPTY), CALL, DELIVER_ALL],
        vec![PARSE, BIND, execute(OK), FLUSH, DELIVER_ALL, SYNC, DELIVER_ALL],
        vec![PARSE, DESCRIBE_S, SYNC, CLOSE, SYNC, DELIVER_ALL],
        vec![PARSE, BIND, execute(SUSPEND), execute(OK), SYNC, DELIVER_ALL],
        vec![PARSE_FAILS, BIND, execute(OK), SYNC, PARSE, SYNC, DELIVER_ALL],
        vec![PARSE, BIND_FAILS, DELIVER_ALL, query(OK), SYNC, DELIVER_ALL],
        vec![PARSE, BIND, execute(COPY_IN), SYNC, DELIVER_ALL, DATA, DONE, SYNC, DELIVER_ALL],
        vec![PARSE, BIND, execute(COPY_IN), SYNC, DATA, DONE, SYNC, DELIVER_ALL],
        vec![PARSE, BIND, execute(COPY_IN), TAIL_SYNC, DATA, FAIL, SYNC, DELIVER_ALL],
        vec![PARSE, BIND, execute(COPY_OUT), SYNC, DELIVER_ONE, DELIVER_ONE, DELIVER_ALL],
        vec![PARSE, BIND, execute(BEGIN), SYNC, DELIVER_ALL, PARSE, BIND, execute(COMMIT), SYNC, DELIVER_ALL],
        vec![PARSE, BIND, execute(ERROR), DELIVER_ALL, query(OK), SYNC, DELIVER_ALL],
        vec![query(0), 1, DELIVER_ALL],
        vec![execute(EMPTY), SYNC, NOTICE, NOTICE, DELIVER_ALL],
    ];
    for a in [OK, ERROR, BEGIN, COMMIT, COPY_OUT, EMPTY, SUSPEND] {
        seeds.push(ext(a).into_iter().chain([DELIVER_ALL]).collect());
    }
    seeds
}
