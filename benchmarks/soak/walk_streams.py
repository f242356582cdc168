"""The stream traffic of a Context walk: the peer and the local end send, read, drain and
fill; the peer shuts down or closes; a watched stream is closed without ``remove()``
(behind a ``dup``, or with its fd number given at once to a new stream); slots get new
pairs.  Each operation tells the model what the watcher should see next.
"""

from __future__ import annotations

import os
import socket

from .common import Violation
from .model import SlotModel
from .streams import inq, read_some, write_some
from .walk import Walk

__all__ = ["StreamOps"]

MAX_DUPS = 6
SIZES = (1, 7, 100, 1000, 16_000, 70_000)


class StreamOps(Walk):
    """The operations on the streams themselves (never on the Context)."""

    def op_peer_send(self) -> None:
        slot = self.pick(self.peer_writable())
        pair = slot.pair
        size = self.streams.room(pair, slot.to_local, self.rng.choice(SIZES))
        before = inq(pair.local) if slot.local_open else 0
        sent = write_some(pair.peer, size) if size else 0
        self.log.add(f"peer of slot {slot.index} ({slot.kind}) sends {size} B: {sent} taken")
        slot.touch()
        if not sent:
            return
        slot.to_local += sent
        if slot.local_open:
            expected = before + self.streams.wire_bytes(pair, sent)
            self.settle(slot, self.streams.settle_landed(pair, pair.local, expected))
            self.model.transition(slot, read=True, write=False, hangup=False)

    def peer_writable(self) -> list[SlotModel]:
        return [
            s
            for s in self.model.slots
            if s.peer_open
            and not s.peer_shut
            and s.kind != "pipe-w"
            and (s.local_open or s.kept)
            and s.to_local < 400_000
        ]

    def op_local_read(self) -> None:
        slot = self.pick([s for s in self.model.slots if s.local_open and s.to_local])
        size = self.rng.randint(1, min(slot.to_local, 20_000))
        count = read_some(slot.pair.local, size)
        self.log.add(f"local end of slot {slot.index} ({slot.kind}) reads {size} B: {count}")
        slot.touch()
        if count:
            slot.to_local -= count
        elif count == 0 and not (slot.reset or slot.peer_gone()):
            raise Violation(f"slot {slot.index}: end of file with the peer open", model_bug=True)
        if count == 0:
            slot.to_local = 0

    def local_readable(self) -> list[SlotModel]:
        return [s for s in self.model.slots if s.local_open and s.kind != "pipe-w"]

    def op_local_drain(self) -> None:
        slot = self.pick(self.local_readable())
        got, eof = self.streams.read_exactly(slot.pair.local, slot.to_local)
        self.log.add(
            f"local end of slot {slot.index} ({slot.kind}) drains: {got} B"
            f"{', end of file' if eof else ''} (model: {slot.to_local})"
        )
        slot.touch()
        if got < slot.to_local and not eof and not slot.reset:
            self.settle(slot, False)
        if eof and not (slot.reset or slot.peer_gone()):
            raise Violation(f"slot {slot.index}: end of file with the peer open", model_bug=True)
        slot.to_local = 0

    def op_local_send(self) -> None:
        slot = self.pick(self.local_writable())
        pair = slot.pair
        size = self.streams.room(pair, slot.to_peer, self.rng.choice(SIZES))
        before = inq(pair.peer)
        sent = write_some(pair.local, size) if size else 0
        self.log.add(f"local end of slot {slot.index} ({slot.kind}) sends {size} B: {sent} taken")
        slot.touch()
        slot.to_peer += sent
        if sent < size and slot.kind != "tls":
            slot.filled = True
        elif sent:
            expected = before + self.streams.wire_bytes(pair, sent)
            self.settle(slot, self.streams.settle_landed(pair, pair.peer, expected))

    def local_writable(self) -> list[SlotModel]:
        return [
            s
            for s in self.model.slots
            if s.local_open
            and s.peer_open
            and s.kind != "pipe-r"
            and not s.filled
            and s.to_peer < 400_000
        ]

    def op_local_fill(self) -> None:
        slot = self.pick([s for s in self.local_writable() if s.kind != "tls"])
        total = 0
        while True:
            sent = write_some(slot.pair.local, 1 << 16)
            if not sent:
                break
            total += sent
        self.log.add(f"local end of slot {slot.index} ({slot.kind}) fills: {total} B taken")
        slot.touch()
        slot.to_peer += total
        slot.filled = True
        self.count("fills")

    def op_peer_drain(self) -> None:
        slot = self.pick(
            [s for s in self.model.slots if s.peer_open and s.local_open and s.kind != "pipe-r"]
        )
        got, _ = self.streams.read_exactly(slot.pair.peer, slot.to_peer)
        self.log.add(
            f"peer of slot {slot.index} ({slot.kind}) drains: {got} B (model: {slot.to_peer})"
        )
        slot.touch()
        if got < slot.to_peer:
            self.settle(slot, False)
        was_filled = slot.filled
        slot.to_peer = 0
        slot.filled = False
        if was_filled:
            self.settle(slot, self.streams.settle_acked(slot.pair))
        self.model.transition(
            slot, read=False, write=was_filled and slot.kind in ("unix", "pipe-w"), hangup=False
        )

    def op_peer_shutdown(self) -> None:
        slot = self.pick(
            [
                s
                for s in self.model.slots
                if s.peer_open and not s.peer_shut and s.kind in ("unix", "tcp") and s.local_open
            ]
        )
        self.log.add(f"peer of slot {slot.index} ({slot.kind}) shuts down writing")
        slot.pair.peer.shutdown(socket.SHUT_WR)
        slot.touch()
        slot.peer_shut = True
        self.settle(slot, self.streams.settle_closed(slot.pair))
        self.model.transition(slot, read=True, write=False, hangup=True)

    def op_peer_close(self) -> None:
        slot = self.pick([s for s in self.model.slots if s.peer_open])
        peer = slot.pair.peer
        # Closing a socket with bytes unread in its kernel resets the connection.
        reset = slot.kind in ("unix", "tcp", "tls") and inq(peer) > 0
        self.log.add(
            f"peer of slot {slot.index} ({slot.kind}) closes"
            f"{' with bytes unread: reset' if reset else ''}"
        )
        # Whether the local end sees something new: TCP sent its FIN at the shutdown
        # already, and a close sends nothing more unless it resets; AF_UNIX and pipes wake
        # the other end at the close itself.
        news = reset or not slot.peer_shut or slot.kind not in ("tcp", "tls")
        peer.close()
        slot.touch()
        slot.peer_open = False
        slot.reset = slot.reset or reset
        slot.to_peer = 0
        slot.filled = False
        if slot.local_open:
            self.settle(slot, self.streams.settle_closed(slot.pair))
            if news:
                self.model.transition(slot, read=True, write=False, hangup=True)
        self.count("peer_closes")

    def op_local_close(self) -> None:
        """Close a watched stream without remove(), maybe behind a dup, maybe giving its fd
        number at once to a new stream that is then added."""
        rng = self.rng
        slot = self.pick([s for s in self.watched() if s.local_open])
        local = slot.pair.local
        number = local.fileno()
        dup = rng.random() < 0.4
        if dup:
            while len(self.keepers) >= MAX_DUPS:
                self.release_dup(0)
            self.keepers.append((os.dup(number), slot))
            self.count("dups_with_data" if slot.to_local else "dups")
        local.close()
        slot.touch()
        slot.local_open = False
        slot.kept = dup
        model = slot.watcher
        if model is not None:
            self.model.retire(model, "retired")
        reuse = rng.random() < 0.6
        self.log.add(
            f"local end of slot {slot.index} ({slot.kind}, fd {number}) closed without "
            f"remove(){', a dup keeps its file' if dup else ''}"
            f"{', fd number reused at once' if reuse else ''}"
        )
        self.count("closes")
        if reuse:
            fresh = self.renew(slot)
            if fresh.pair.local.fileno() == number:
                self.count("fd_reused")
            if rng.random() < 0.8:
                self.op_add(fresh)

    def op_renew(self) -> None:
        self.renew(self.pick([s for s in self.model.slots if not s.local_open]))

    def renew(self, slot: SlotModel) -> SlotModel:
        """A new pair (and model) in the slot; the old peer is closed after it is made, so
        that the new local end gets the lowest free fd number: the closed local end's."""
        pair = self.new_pair()
        slot.pair.peer.close()
        slot.peer_open = False
        fresh = SlotModel(slot.index, pair)
        self.model.slots[slot.index] = fresh
        self.log.add(f"slot {slot.index}: new {pair.kind} pair, local fd {pair.local.fileno()}")
        return fresh

    def op_release_dup(self) -> None:
        self.release_dup(self.rng.randrange(len(self.keepers)))

    def release_dup(self, index: int) -> None:
        fd, slot = self.keepers.pop(index)
        self.log.add(f"close the dup fd {fd} of slot {slot.index}'s closed stream")
        os.close(fd)
        if not any(owner is slot for _, owner in self.keepers):
            slot.kept = False
