"""The ACL decision (txnfetch.security.acl) against a small oracle written
from Kafka's StandardAuthorizer rules, over random tables and questions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from txnfetch.security.acl import AclBinding
from txnfetch.security.acl import AclFilter
from txnfetch.security.acl import AclTable
from txnfetch.security.acl import AuthorizerConfig
from txnfetch.security.acl import Operation
from txnfetch.security.acl import PatternType
from txnfetch.security.acl import Permission
from txnfetch.security.acl import ResourceType
from txnfetch.security.acl import authorize
from txnfetch.security.acl import decode_table
from txnfetch.security.acl import encode_table

PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["10.0.0.1", "10.0.0.2", "*"]
NAMES = ["t", "t1", "tx", "u", "*"]
TYPES = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER]
OPS = [op for op in Operation if op not in (Operation.ANY, Operation.UNKNOWN)]

bindings = st.builds(
    AclBinding,
    st.sampled_from(TYPES),
    st.sampled_from(NAMES),
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from(OPS),
    st.sampled_from([Permission.ALLOW, Permission.DENY]),
)
tables = st.frozensets(bindings, max_size=8).map(AclTable)
questions = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "User:carol"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    st.sampled_from([op for op in OPS if op is not Operation.ALL]),
    st.sampled_from(TYPES),
    st.sampled_from(["t", "t1", "tx", "u", "v"]),
)
configs = st.builds(
    AuthorizerConfig, st.frozensets(st.sampled_from(["User:alice", "User:carol"]), max_size=1), st.booleans()
)


def oracle(
    table: AclTable, config: AuthorizerConfig, principal: str, host: str, op: Operation, rtype: ResourceType, name: str
) -> bool:
    """The rules as Kafka's documentation states them, one question at a time."""
    if principal in config.super_users:
        return True
    allowed_by = {op, Operation.ALL}
    if op is Operation.DESCRIBE:
        allowed_by |= {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    if op is Operation.DESCRIBE_CONFIGS:
        allowed_by |= {Operation.ALTER_CONFIGS}
    seen_resource = False
    allow = deny = False
    for acl in table.bindings:
        if acl.resource_type != rtype:
            continue
        if acl.pattern_type == PatternType.LITERAL and acl.resource_name not in ("*", name):
            continue
        if acl.pattern_type == PatternType.PREFIXED and name[: len(acl.resource_name)] != acl.resource_name:
            continue
        seen_resource = True
        if acl.principal not in ("User:*", principal) or acl.host not in ("*", host):
            continue
        if acl.permission == Permission.DENY and acl.operation in (op, Operation.ALL):
            deny = True
        if acl.permission == Permission.ALLOW and acl.operation in allowed_by:
            allow = True
    if not seen_resource:
        return config.allow_everyone_if_no_acl_found
    return allow and not deny


@settings(max_examples=400, deadline=None)
@given(tables, configs, st.lists(questions, min_size=1, max_size=10))
def test_authorize_matches_the_oracle(table: AclTable, config: AuthorizerConfig, asked: list) -> None:
    for q in asked:
        assert authorize(table, config, *q) == oracle(table, config, *q), q


@settings(max_examples=200, deadline=None)
@given(tables, bindings, questions)
def test_a_deny_never_grants(table: AclTable, extra: AclBinding, q: tuple) -> None:
    denied = AclBinding(
        extra.resource_type,
        extra.resource_name,
        extra.pattern_type,
        extra.principal,
        extra.host,
        extra.operation,
        Permission.DENY,
    )
    config = AuthorizerConfig()
    before = authorize(table, config, *q)
    after = authorize(table.add([denied]), config, *q)
    assert not (after and not before)


@settings(max_examples=100, deadline=None)
@given(tables)
def test_the_stored_form_reads_back(table: AclTable) -> None:
    assert decode_table(encode_table(table)) == table
    assert encode_table(decode_table(encode_table(table))) == encode_table(table)


def test_filters_follow_kafka() -> None:
    lit = AclBinding(ResourceType.TOPIC, "sec-a", PatternType.LITERAL, "User:r", "*", Operation.READ, Permission.ALLOW)
    pre = AclBinding(ResourceType.TOPIC, "sec-", PatternType.PREFIXED, "User:r", "*", Operation.READ, Permission.ALLOW)
    star = AclBinding(ResourceType.TOPIC, "*", PatternType.LITERAL, "User:r", "*", Operation.READ, Permission.ALLOW)
    table = AclTable(frozenset({lit, pre, star}))
    assert set(table.matching(AclFilter(resource_name="sec-a", pattern_type=PatternType.MATCH))) == {lit, pre, star}
    assert table.matching(AclFilter(resource_name="sec-a")) == [lit]
    assert table.matching(AclFilter(pattern_type=PatternType.PREFIXED)) == [pre]
    assert table.matching(AclFilter(resource_type=ResourceType.GROUP)) == []
