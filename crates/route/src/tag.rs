//! PostgreSQL's names for statement parse nodes, for logs and per-type statistics.

use pg_raw_parse::raw::NodeTag;
use pg_raw_parse::Node;

macro_rules! tags {
    ($node:expr; $($v:ident),* $(,)?) => {
        match $node {
            $(Node::$v(_) => stringify!($v),)*
            Node::Invalid(raw) => invalid_tag(raw.type_),
            _ => "Unknown",
        }
    };
}

/// PostgreSQL's name for a statement's parse node.
pub(crate) fn tag(node: Node<'_>) -> &'static str {
    tags!(node;
        InsertStmt, DeleteStmt, UpdateStmt, MergeStmt, SelectStmt, SetOperationStmt, ReturnStmt,
        PLAssignStmt, CreateSchemaStmt, AlterTableStmt, ReplicaIdentityStmt, AlterCollationStmt,
        AlterDomainStmt, GrantStmt, GrantRoleStmt, AlterDefaultPrivilegesStmt, CopyStmt,
        VariableSetStmt, VariableShowStmt, CreateStmt, CreateTableSpaceStmt, DropTableSpaceStmt,
        AlterTableSpaceOptionsStmt, AlterTableMoveAllStmt, CreateExtensionStmt, AlterExtensionStmt,
        AlterExtensionContentsStmt, CreateFdwStmt, AlterFdwStmt, CreateForeignServerStmt,
        AlterForeignServerStmt, CreateUserMappingStmt, AlterUserMappingStmt, DropUserMappingStmt,
        ImportForeignSchemaStmt, CreatePolicyStmt, AlterPolicyStmt, CreateAmStmt, CreateTrigStmt,
        CreateEventTrigStmt, AlterEventTrigStmt, CreatePLangStmt, CreateRoleStmt, AlterRoleStmt,
        AlterRoleSetStmt, DropRoleStmt, CreateSeqStmt, AlterSeqStmt, DefineStmt, CreateDomainStmt,
        CreateOpClassStmt, CreateOpFamilyStmt, AlterOpFamilyStmt, DropStmt, TruncateStmt,
        CommentStmt, SecLabelStmt, DeclareCursorStmt, ClosePortalStmt, FetchStmt, IndexStmt,
        CreateStatsStmt, AlterStatsStmt, CreateFunctionStmt, AlterFunctionStmt, DoStmt, CallStmt,
        RenameStmt, AlterObjectDependsStmt, AlterObjectSchemaStmt, AlterOwnerStmt,
        AlterOperatorStmt, AlterTypeStmt, RuleStmt, NotifyStmt, ListenStmt, UnlistenStmt,
        TransactionStmt, CompositeTypeStmt, CreateEnumStmt, CreateRangeStmt, AlterEnumStmt,
        ViewStmt, LoadStmt, CreatedbStmt, AlterDatabaseStmt, AlterDatabaseRefreshCollStmt,
        AlterDatabaseSetStmt, DropdbStmt, AlterSystemStmt, ClusterStmt, VacuumStmt, ExplainStmt,
        CreateTableAsStmt, RefreshMatViewStmt, CheckPointStmt, DiscardStmt, LockStmt,
        ConstraintsSetStmt, ReindexStmt, CreateConversionStmt, CreateCastStmt,
        CreateTransformStmt, PrepareStmt, ExecuteStmt, DeallocateStmt, DropOwnedStmt,
        ReassignOwnedStmt, AlterTSDictionaryStmt, AlterTSConfigurationStmt,
        CreatePublicationStmt, AlterPublicationStmt, CreateSubscriptionStmt,
        AlterSubscriptionStmt, DropSubscriptionStmt,
    )
}

/// Statement nodes `pg_raw_parse` 0.1.0 has no variant for.
fn invalid_tag(t: NodeTag::Type) -> &'static str {
    match t {
        NodeTag::T_CreateForeignTableStmt => "CreateForeignTableStmt",
        _ => "Unknown",
    }
}
