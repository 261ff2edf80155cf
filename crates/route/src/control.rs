//! Transaction control (`BEGIN`, `COMMIT`, savepoints, two-phase commands) and `SET`-family
//! statements: their options, names and values, and the session effects of `SET`/`RESET`.

use pg_raw_parse::nodes::{DefElem, TransactionStmt, TransactionStmtKind, VariableSetKind, VariableSetStmt};
use pg_raw_parse::{ConstValue, Node};

use crate::functions::{const_text, itoa_buf, ConstText};
use crate::kind::{def_true, Head};
use crate::model::{IsolationLevel, SetScope, StatementKind, TransactionOptions};
use crate::store::{EffectData, Span};
use crate::walk::Walker;

impl<'t> Walker<'t, '_> {
    pub(crate) fn transaction(&mut self, t: &'t TransactionStmt) -> Head {
        use StatementKind as K;
        let kind = match t.kind {
            TransactionStmtKind::TRANS_STMT_BEGIN | TransactionStmtKind::TRANS_STMT_START => {
                K::Begin(transaction_options(t.options().iter().filter_map(|o| match o {
                    Node::DefElem(d) => Some(d),
                    _ => None,
                })))
            }
            TransactionStmtKind::TRANS_STMT_COMMIT => K::Commit { chain: t.chain },
            TransactionStmtKind::TRANS_STMT_ROLLBACK => K::Rollback { chain: t.chain },
            TransactionStmtKind::TRANS_STMT_SAVEPOINT => K::Savepoint,
            TransactionStmtKind::TRANS_STMT_RELEASE => K::Release,
            TransactionStmtKind::TRANS_STMT_ROLLBACK_TO => K::RollbackToSavepoint,
            TransactionStmtKind::TRANS_STMT_PREPARE => K::PrepareTransaction,
            TransactionStmtKind::TRANS_STMT_COMMIT_PREPARED => K::CommitPrepared,
            TransactionStmtKind::TRANS_STMT_ROLLBACK_PREPARED => K::RollbackPrepared,
            _ => K::Other,
        };
        let name = t.savepoint_name().or(t.gid());
        // Two-phase commands act on the primary's prepared transactions.
        let writes = matches!(kind, K::PrepareTransaction | K::CommitPrepared | K::RollbackPrepared);
        Head::named(kind, self.opt(name)).writes(writes)
    }

    pub(crate) fn set(&mut self, v: &'t VariableSetStmt) -> Head {
        use StatementKind as K;
        let scope = if v.is_local { SetScope::Local } else { SetScope::Session };
        let raw_name = v.name();
        let name = self.opt(raw_name);
        let session = scope == SetScope::Session;
        let head = match v.kind {
            VariableSetKind::VAR_SET_MULTI if raw_name == Some("TRANSACTION") => {
                let opts = v.args().iter().filter_map(|a| match a {
                    Node::DefElem(d) => Some(d),
                    _ => None,
                });
                return Head::kind(K::SetTransaction(transaction_options(opts))).writes(false);
            }
            VariableSetKind::VAR_RESET | VariableSetKind::VAR_RESET_ALL => {
                self.s.effects.push(EffectData::Reset { name });
                Head::named(K::Reset, name)
            }
            VariableSetKind::VAR_SET_DEFAULT => {
                if session {
                    self.s.effects.push(EffectData::Reset { name });
                }
                Head::named(K::Set { scope }, name)
            }
            VariableSetKind::VAR_SET_VALUE => {
                let value = self.set_value(v);
                if session {
                    self.s.effects.push(EffectData::Set { name, value });
                }
                Head { value, ..Head::named(K::Set { scope }, name) }
            }
            // FROM CURRENT, SESSION CHARACTERISTICS, and anything newer.
            _ => {
                if session {
                    self.s.effects.push(EffectData::Set { name, value: None });
                }
                Head::named(K::Set { scope }, name)
            }
        };
        head.writes(false)
    }

    /// The arguments of `SET name TO a, b, ...` joined with `", "`; `None` if any is not a
    /// literal.
    fn set_value(&mut self, v: &'t VariableSetStmt) -> Option<Span> {
        let start = self.s.arena.len();
        let mut buf = itoa_buf::Buf::new();
        for (i, arg) in v.args().iter().enumerate() {
            let text = match const_text(arg, &mut buf) {
                Some(ConstText::Str(s)) => s,
                Some(ConstText::Int(r)) => buf.get(r),
                Some(ConstText::Bool(b)) => {
                    if b {
                        "on"
                    } else {
                        "off"
                    }
                }
                None => {
                    self.s.arena.truncate(start);
                    return None;
                }
            };
            if i > 0 {
                self.s.arena.push_str(", ");
            }
            self.s.arena.push_str(text);
        }
        Some(Span { start: start as u32, len: (self.s.arena.len() - start) as u32 })
    }
}

/// `BEGIN`/`SET TRANSACTION` options from their `DefElem`s.
fn transaction_options<'a>(opts: impl Iterator<Item = &'a DefElem>) -> TransactionOptions {
    let mut out = TransactionOptions::default();
    for d in opts {
        match d.defname() {
            Some("transaction_isolation") => {
                out.isolation = match d.arg() {
                    Node::A_Const(c) => match c.val() {
                        Some(ConstValue::String("serializable")) => Some(IsolationLevel::Serializable),
                        Some(ConstValue::String("repeatable read")) => Some(IsolationLevel::RepeatableRead),
                        Some(ConstValue::String("read committed")) => Some(IsolationLevel::ReadCommitted),
                        Some(ConstValue::String("read uncommitted")) => Some(IsolationLevel::ReadUncommitted),
                        _ => None,
                    },
                    _ => None,
                }
            }
            Some("transaction_read_only") => out.read_only = Some(def_true(d)),
            Some("transaction_deferrable") => out.deferrable = Some(def_true(d)),
            _ => {}
        }
    }
    out
}
