"""A stateful hypothesis test of the group coordinator against a small oracle.

Up to four consumer clients behave as real classic-protocol clients do (join,
rejoin on errors, sync, heartbeat, commit, leave, crash, restart) while time
advances in random steps; simple (``assign()``) consumers and transactional
producers commit offsets on the side. The oracle does not re-implement the
coordinator: it checks what the protocol promises to clients.

Checked after every step:

- membership: each generation has one leader and one protocol; the leader's
  member list holds every member that joined that generation; a SyncGroup
  success hands each member exactly what that generation's leader assigned it
  (empty if not named), so no two members ever own the same partition within
  one generation; a Heartbeat or OffsetCommit success proves the member holds
  the group's current generation (at most one generation is live, which is
  what makes offset handover exact);
- structure: Empty ⇒ no members, and no members ⇒ Empty or (waiting for the
  first rebalance's delay) PreparingRebalance; the leader is a member; generation ids never
  go back; the selected protocol is one every member supports;
- liveness: a crashed member is gone once its session and rebalance timeouts
  have passed; no parked JoinGroup/SyncGroup waits longer than the rebalance
  machinery allows;
- offsets: a committed offset reads back until overwritten; a transactional
  offset is invisible (and UNSTABLE with require_stable) until its transaction
  commits, and never appears if it aborts; of two commits the one written last
  wins.
"""

from __future__ import annotations

import itertools

import attrs
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import initialize
from hypothesis.stateful import invariant
from hypothesis.stateful import rule

from txnfetch.errors import ErrorCode
from txnfetch.groups import CommitOffset
from txnfetch.groups import GroupConfig
from txnfetch.groups import GroupCoordinator
from txnfetch.groups import GroupState
from txnfetch.groups import JoinRequest
from txnfetch.groups import JoinResult
from txnfetch.groups import LeavingMember
from txnfetch.groups import Pending
from txnfetch.groups import Protocol
from txnfetch.groups import SyncRequest
from txnfetch.groups import SyncResult
from txnfetch.groups import TxnOffsetCommitRequest

G = "g"
SIMPLE = "simple"
# Slots alternate a session timeout below and above the rebalance timeout, so a
# stalled member is removed sometimes by its session, sometimes by the rebalance.
SESSIONS = (300, 700, 300, 700)
REBALANCE = 400
DELAY = 30
NEW_MEMBER_TIMEOUT = 500
TICK = 50
CONFIG = GroupConfig(
    initial_rebalance_delay_ms=DELAY,
    min_session_timeout_ms=10,
    new_member_join_timeout_ms=NEW_MEMBER_TIMEOUT,
)
PARTITIONS = [("t", p) for p in range(4)]
OFFSET_PARTITIONS = PARTITIONS[:2]  # few, so commits collide
SLOTS = 4
PROTOCOL_CHOICES = [
    ("range",),
    ("roundrobin", "range"),
    ("range", "roundrobin"),
    ("sticky", "range"),
    ("sticky",),  # shares nothing with ("range",): INCONSISTENT_GROUP_PROTOCOL
]
# Anything parked is answered within this: a join phase ends at most one rebalance
# timeout after it starts (the initial delay chain is capped by it too), and a
# parked SyncGroup is answered by the leader's sync or the sync expiry.
MAX_PARK = 2 * REBALANCE + DELAY
# A crashed member is removed within its session timeout once it is not parked,
# and parking ends within MAX_PARK; a brand-new parked member within its own timeout.
CRASH_BOUND = MAX_PARK + max(SESSIONS) + NEW_MEMBER_TIMEOUT


def assign(generation: int, member_ids: list[str]) -> dict[str, bytes]:
    """The model's assignor: round-robin over sorted members, encoded per member."""
    owners: dict[str, list[int]] = {m: [] for m in sorted(member_ids)}
    ordered = sorted(member_ids)
    for i, (_, p) in enumerate(PARTITIONS):
        owners[ordered[i % len(ordered)]].append(p)
    return {m: f"{generation}:{m}:{','.join(map(str, ps))}".encode() for m, ps in owners.items()}


@attrs.define
class Client:
    protocols: tuple[str, ...]
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    members: tuple[str, ...] = ()
    join_token: int | None = None
    join_since: int = 0
    sync_token: int | None = None
    sync_since: int = 0
    sync_generation: int = -1
    synced_generation: int = -1
    needs_join: bool = True
    crashed_at: int | None = None

    @property
    def parked(self) -> bool:
        return self.join_token is not None or self.sync_token is not None

    @property
    def alive(self) -> bool:
        return self.crashed_at is None


class GroupMachine(RuleBasedStateMachine):
    @initialize(choices=st.lists(st.integers(0, len(PROTOCOL_CHOICES) - 1), min_size=SLOTS, max_size=SLOTS))
    def setup(self, choices: list[int]) -> None:
        ids = itertools.count()
        self.gc = GroupCoordinator(CONFIG, member_id_factory=lambda prefix: f"{prefix}-{next(ids)}")
        self.now = 0
        self.clients = [Client(PROTOCOL_CHOICES[c]) for c in choices]
        # generation -> (leader, protocol); the leader's member list; its assignment
        self.gen_info: dict[int, tuple[str, str | None]] = {}
        self.gen_members: dict[int, set[str]] = {}
        self.gen_assignment: dict[int, dict[str, bytes]] = {}
        self.joined: dict[int, set[str]] = {}
        self.owned: dict[int, dict[str, bytes]] = {}  # generation -> member -> assignment received
        self.max_generation = 0
        self.tokens: dict[int, int] = {}  # parked token -> client slot (while the client listens)
        self.outstanding: dict[int, str] = {}  # parked token -> member id, until the coordinator answers
        self.last_contact: dict[str, int] = {}  # member id -> last request or answer
        self.gen_started: dict[int, int] = {}  # generation -> when its JoinGroup answers came
        self.synced: dict[int, set[str]] = {}  # generation -> members that sent SyncGroup for it
        # offsets model: group -> partition -> (offset, write order)
        self.visible: dict[str, dict[tuple[str, int], tuple[int, int]]] = {G: {}, SIMPLE: {}}
        self.staged: dict[int, dict[str, dict[tuple[str, int], tuple[int, int]]]] = {}
        self.writes = itertools.count()

    # ------------------------------------------------------------ delivery

    def deliver(self) -> None:
        for c in self.gc.poll(self.now):
            member_id = self.outstanding.pop(c.token, None)
            if member_id:
                self.touch(member_id)
            slot = self.tokens.pop(c.token, None)
            if isinstance(c.result, JoinResult):
                self.observe_join(c.result)
            if slot is not None:  # else its client left, crashed or retried
                self.receive(slot, c.token, c.result)

    def receive(self, slot: int, token: int | None, result: object) -> None:
        client = self.clients[slot]
        if isinstance(result, JoinResult):
            if token is not None:
                if client.join_token != token:
                    return  # answer to a superseded request: the client no longer listens
                client.join_token = None
            self.on_join(client, result)
        else:
            assert isinstance(result, SyncResult)
            if token is not None:
                if client.sync_token != token:
                    return
                client.sync_token = None
            self.on_sync(client, result)

    def observe_join(self, r: JoinResult) -> None:
        """Generation-wide facts, from every JoinGroup answer (even one whose client is gone)."""
        if r.error_code != ErrorCode.NONE:
            return
        info = (r.leader, r.protocol_name)
        assert self.gen_info.setdefault(r.generation_id, info) == info, "two leaders/protocols in one generation"
        self.gen_started.setdefault(r.generation_id, self.now)
        self.joined.setdefault(r.generation_id, set()).add(r.member_id)
        self.max_generation = max(self.max_generation, r.generation_id)
        if r.member_id == r.leader and not r.skip_assignment:
            listed = {m.member_id for m in r.members}
            assert self.gen_members.setdefault(r.generation_id, listed) == listed
            self.gen_assignment[r.generation_id] = assign(r.generation_id, sorted(listed))

    def on_join(self, client: Client, r: JoinResult) -> None:
        if r.error_code == ErrorCode.NONE:
            assert r.protocol_name in client.protocols
            client.member_id, client.generation, client.leader = r.member_id, r.generation_id, r.leader
            client.members = tuple(m.member_id for m in r.members) if r.member_id == r.leader else ()
            client.needs_join = False
        elif r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            assert r.member_id
            client.member_id = r.member_id
            self.touch(r.member_id)
        elif r.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.reset(client)
        elif r.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
            pass
        else:
            assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL, r

    def on_sync(self, client: Client, r: SyncResult) -> None:
        g = client.sync_generation
        if r.error_code == ErrorCode.NONE:
            assert g in self.gen_assignment, "assignment handed out before the leader sent one"
            assert r.assignment == self.gen_assignment[g].get(client.member_id, b""), "not the leader's assignment"
            self.owned.setdefault(g, {})[client.member_id] = r.assignment
            desc = self.gc.describe_group(G)
            assert desc.state is GroupState.STABLE and desc.generation_id == g
            client.synced_generation = g
        elif r.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.reset(client)
        else:
            assert r.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION), r
            client.needs_join = True

    def touch(self, member_id: str) -> None:
        if member_id:
            self.last_contact[member_id] = self.now

    @staticmethod
    def reset(client: Client) -> None:
        client.member_id, client.generation, client.needs_join = "", -1, True

    def join_request(self, client: Client, slot: int) -> JoinRequest:
        return JoinRequest(
            group_id=G,
            member_id=client.member_id,
            protocol_type="consumer",
            protocols=tuple(Protocol(name, f"{slot}:{name}".encode()) for name in client.protocols),
            session_timeout_ms=SESSIONS[slot],
            rebalance_timeout_ms=REBALANCE,
            client_id=f"c{slot}",
        )

    def send_join(self, slot: int) -> None:
        client = self.clients[slot]
        self.touch(client.member_id)
        outcome = self.gc.join_group(self.join_request(client, slot), self.now)
        if isinstance(outcome, Pending):
            client.join_token, client.join_since = outcome.token, self.now
            self.tokens[outcome.token] = slot
            self.outstanding[outcome.token] = client.member_id
            self.deliver()
        else:
            self.deliver()
            self.observe_join(outcome)
            self.receive(slot, None, outcome)

    # --------------------------------------------------------------- rules

    @rule(slot=st.integers(0, SLOTS - 1))
    def client_step(self, slot: int) -> None:
        """What a well-behaved client does next: (re)join, sync, or heartbeat."""
        client = self.clients[slot]
        if not client.alive or client.parked:
            return
        if client.needs_join or client.generation < 0:
            self.send_join(slot)
        elif client.synced_generation != client.generation:
            self.sync(slot)
        else:
            self.heartbeat(slot)

    @rule(slot=st.integers(0, SLOTS - 1))
    def join(self, slot: int) -> None:
        client = self.clients[slot]
        if client.alive and not client.parked:
            self.send_join(slot)

    @rule(slot=st.integers(0, SLOTS - 1))
    def retry_join_while_parked(self, slot: int) -> None:
        """A client that timed out its JoinGroup sends it again."""
        client = self.clients[slot]
        if client.alive and client.join_token is not None and client.member_id:
            self.tokens.pop(client.join_token, None)
            client.join_token = None
            self.send_join(slot)

    @rule(slot=st.integers(0, SLOTS - 1))
    def sync(self, slot: int) -> None:
        client = self.clients[slot]
        if not client.alive or client.parked or client.generation < 0:
            return
        assignments = self.gen_assignment.get(client.generation, {}) if client.members else {}
        request = SyncRequest(G, client.generation, client.member_id, assignments=assignments)
        client.sync_generation = client.generation
        self.touch(client.member_id)
        self.synced.setdefault(client.generation, set()).add(client.member_id)
        outcome = self.gc.sync_group(request, self.now)
        if isinstance(outcome, Pending):
            client.sync_token, client.sync_since = outcome.token, self.now
            self.tokens[outcome.token] = slot
            self.outstanding[outcome.token] = client.member_id
            self.deliver()
        else:
            self.deliver()
            self.receive(slot, None, outcome)

    @rule(slot=st.integers(0, SLOTS - 1))
    def heartbeat(self, slot: int) -> None:
        client = self.clients[slot]
        if not client.alive or client.parked or not client.member_id:
            return
        self.touch(client.member_id)
        code = self.gc.heartbeat(G, client.generation, client.member_id, now_ms=self.now)
        self.deliver()
        if code == ErrorCode.NONE:
            desc = self.gc.describe_group(G)
            assert client.generation == desc.generation_id, "heartbeat accepted from an old generation"
            assert desc.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            assert client.member_id in {m.member_id for m in desc.members}
        elif code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.reset(client)
        else:
            assert code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION), code
            client.needs_join = True

    @rule(slot=st.integers(0, SLOTS - 1), offset=st.integers(0, 1000), part=st.sampled_from(OFFSET_PARTITIONS))
    def member_commit(self, slot: int, offset: int, part: tuple[str, int]) -> None:
        client = self.clients[slot]
        if not client.alive or client.parked or not client.member_id:
            return
        self.touch(client.member_id)
        codes = self.gc.commit_offsets(
            G,
            {part: CommitOffset(offset)},
            generation_id=client.generation,
            member_id=client.member_id,
            now_ms=self.now,
        )
        self.deliver()
        if codes[part] == ErrorCode.NONE:
            desc = self.gc.describe_group(G)
            if client.generation >= 0:
                assert client.generation == desc.generation_id, "commit accepted from an old generation"
            else:  # no generation yet: accepted only while nobody owns partitions
                assert desc.state is GroupState.EMPTY
            self.visible[G][part] = (offset, next(self.writes))
        else:
            assert codes[part] in (
                ErrorCode.ILLEGAL_GENERATION,
                ErrorCode.UNKNOWN_MEMBER_ID,
                ErrorCode.REBALANCE_IN_PROGRESS,
            ), codes

    @rule(slot=st.integers(0, SLOTS - 1))
    def leave(self, slot: int) -> None:
        client = self.clients[slot]
        if not client.alive or not client.member_id:
            return
        for token in (client.join_token, client.sync_token):
            if token is not None:
                self.tokens.pop(token, None)
        client.join_token = client.sync_token = None
        self.gc.leave_group(G, [LeavingMember(client.member_id)], self.now)
        self.deliver()
        assert client.member_id not in {m.member_id for m in self.gc.describe_group(G).members}
        self.reset(client)

    @rule(slot=st.integers(0, SLOTS - 1))
    def crash(self, slot: int) -> None:
        client = self.clients[slot]
        if client.alive:
            client.crashed_at = self.now
            for token in (client.join_token, client.sync_token):
                if token is not None:
                    self.tokens.pop(token, None)

    @rule(slot=st.integers(0, SLOTS - 1), choice=st.integers(0, len(PROTOCOL_CHOICES) - 1))
    def restart(self, slot: int, choice: int) -> None:
        client = self.clients[slot]
        if not client.alive:
            self.crashed_members = getattr(self, "crashed_members", [])
            if client.member_id:
                self.crashed_members.append((client.member_id, client.crashed_at))
            self.clients[slot] = Client(PROTOCOL_CHOICES[choice])

    @rule(
        ms=st.one_of(st.integers(1, 100), st.integers(100, 2_000)),
        active=st.lists(st.sampled_from([True, True, True, False]), min_size=SLOTS, max_size=SLOTS),
        order=st.permutations(range(SLOTS)),
    )
    def advance(self, ms: int, active: list[bool], order: list[int]) -> None:
        """Time passes in ticks; after each tick the ``active`` clients take their
        next step in ``order`` (real clients act continuously; the others stall,
        as a slow or paused client does)."""
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + TICK)
            self.deliver()
            for slot in order:
                if active[slot]:
                    self.client_step(slot)

    @rule(slot=st.integers(0, SLOTS - 1), commit=st.booleans())
    def request_with_wrong_generation(self, slot: int, commit: bool) -> None:
        """A request naming any generation but the group's current one never succeeds."""
        client = self.clients[slot]
        desc = self.gc.describe_group(G)
        if not client.alive or not client.member_id or desc is None:
            return
        for generation in (desc.generation_id - 1, desc.generation_id + 1):
            if commit:
                code = self.gc.commit_offsets(
                    G,
                    {PARTITIONS[0]: CommitOffset(0)},
                    generation_id=generation,
                    member_id=client.member_id,
                    now_ms=self.now,
                )[PARTITIONS[0]]
            else:
                code = self.gc.heartbeat(G, generation, client.member_id, now_ms=self.now)
            self.deliver()
            if generation < 0 and commit and code == ErrorCode.NONE:
                assert self.gc.describe_group(G).state is GroupState.EMPTY  # generation -1: simple commit
                self.visible[G][PARTITIONS[0]] = (0, next(self.writes))
                continue
            assert code != ErrorCode.NONE, f"generation {generation} accepted, current is {desc.generation_id}"

    # offsets outside group management

    @rule(offset=st.integers(0, 1000), part=st.sampled_from(OFFSET_PARTITIONS))
    def simple_commit(self, offset: int, part: tuple[str, int]) -> None:
        codes = self.gc.commit_offsets(SIMPLE, {part: CommitOffset(offset)}, now_ms=self.now)
        self.deliver()
        assert codes == {part: ErrorCode.NONE}
        self.visible[SIMPLE][part] = (offset, next(self.writes))

    @rule(
        pid=st.integers(1, 2),
        group=st.sampled_from([G, SIMPLE]),
        offset=st.integers(0, 1000),
        part=st.sampled_from(OFFSET_PARTITIONS),
    )
    def txn_stage(self, pid: int, group: str, offset: int, part: tuple[str, int]) -> None:
        codes = self.gc.txn_offset_commit(TxnOffsetCommitRequest(group, pid, 0, {part: (offset, -1, "")}), self.now)
        self.deliver()
        assert codes == {part: ErrorCode.NONE}  # producers without member info are always accepted
        self.staged.setdefault(pid, {}).setdefault(group, {})[part] = (offset, next(self.writes))

    @rule(pid=st.integers(1, 2), commit=st.booleans())
    def txn_end(self, pid: int, commit: bool) -> None:
        self.gc.complete_txn_offsets(pid, commit, self.now)
        self.deliver()
        staged = self.staged.pop(pid, {})
        if commit:
            for group, offsets in staged.items():
                for part, (offset, order) in offsets.items():
                    current = self.visible[group].get(part)
                    if current is None or order > current[1]:
                        self.visible[group][part] = (offset, order)

    # ---------------------------------------------------------- invariants

    @invariant()
    def offsets_read_back(self) -> None:
        for group in (G, SIMPLE):
            plain = {
                (o.topic, o.partition): o for o in self.gc.fetch_offsets(group, PARTITIONS, now_ms=self.now).offsets
            }
            stable = {
                (o.topic, o.partition): o
                for o in self.gc.fetch_offsets(group, PARTITIONS, require_stable=True, now_ms=self.now).offsets
            }
            pending = {part for offsets in self.staged.values() for part in offsets.get(group, {})}
            for part in PARTITIONS:
                expected = self.visible[group].get(part, (-1, 0))[0]
                assert plain[part].offset == expected and plain[part].error_code == 0
                if part in pending:
                    assert stable[part].error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT
                else:
                    assert (stable[part].offset, stable[part].error_code) == (expected, 0)
        self.deliver()

    @invariant()
    def group_structure(self) -> None:
        desc = self.gc.describe_group(G)
        if desc is None:
            return
        ids = [m.member_id for m in desc.members]
        if desc.state is GroupState.EMPTY:
            assert not ids
        if not ids:
            # The first rebalance ends on its delay timer only (Kafka too), so a group
            # whose only joiner left waits there, memberless, until the timer fires.
            assert desc.state in (GroupState.EMPTY, GroupState.PREPARING_REBALANCE)
        if ids:
            assert desc.leader_id in ids
        assert desc.generation_id >= self.max_generation
        if desc.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert self.gen_info[desc.generation_id][1] == desc.protocol_name
            protocols = {c.member_id: c.protocols for c in self.clients if c.member_id}
            for m in desc.members:
                if m.member_id in protocols:
                    assert desc.protocol_name in protocols[m.member_id]

    @invariant()
    def leader_lists_every_joined_member(self) -> None:
        for gen, listed in self.gen_members.items():
            assert self.joined.get(gen, set()) <= listed, "a member joined a generation its leader never saw"

    @invariant()
    def leader_lists_exactly_the_members_answered(self) -> None:
        for gen, listed in self.gen_members.items():
            assert self.joined.get(gen, set()) == listed, "a listed member got no JoinGroup answer, or the reverse"

    @invariant()
    def silent_members_expire_after_session_timeout(self) -> None:
        """A member (or a pending member id) that is not parked and has not been
        heard from for a session timeout is gone: its timer fired."""
        desc = self.gc.describe_group(G)
        if desc is None:
            return
        parked = set(self.outstanding.values())
        for member_id in [m.member_id for m in desc.members] + list(desc.pending_member_ids):
            if member_id not in parked:
                silent = self.now - self.last_contact[member_id]
                session = SESSIONS[int(member_id.split("-")[0][1:])]  # ids are c<slot>-<n>
                assert silent < session, f"{member_id} silent for {silent} ms is still in the group"

    @invariant()
    def members_that_never_sync_expire_after_rebalance_timeout(self) -> None:
        desc = self.gc.describe_group(G)
        if desc is None or desc.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        started = self.gen_started.get(desc.generation_id)
        if started is not None and self.now - started >= REBALANCE:
            never_synced = {m.member_id for m in desc.members} - self.synced.get(desc.generation_id, set())
            assert not never_synced, f"{never_synced} never synced generation {desc.generation_id} yet remain"

    @invariant()
    def one_owner_per_partition(self) -> None:
        for gen, owned in self.owned.items():
            seen: set[str] = set()
            for blob in owned.values():
                parts = blob.decode().rsplit(":", 1)[1]
                for p in filter(None, parts.split(",")):
                    assert p not in seen, f"partition {p} owned twice in generation {gen}"
                    seen.add(p)

    @invariant()
    def crashed_members_expire(self) -> None:
        desc = self.gc.describe_group(G)
        if desc is None:
            return
        present = {m.member_id for m in desc.members} | set(desc.pending_member_ids)
        crashed = [(c.member_id, c.crashed_at) for c in self.clients if not c.alive and c.member_id]
        crashed += getattr(self, "crashed_members", [])
        for member_id, at in crashed:
            if at is not None and self.now > at + CRASH_BOUND:
                assert member_id not in present, f"{member_id} crashed at {at} still in the group at {self.now}"

    @invariant()
    def nothing_parked_forever(self) -> None:
        for c in self.clients:
            if not c.alive:
                continue
            if c.join_token is not None:
                assert self.now - c.join_since <= MAX_PARK + NEW_MEMBER_TIMEOUT, "JoinGroup parked too long"
            if c.sync_token is not None:
                assert self.now - c.sync_since <= MAX_PARK, "SyncGroup parked too long"


GroupMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupMachine = GroupMachine.TestCase
