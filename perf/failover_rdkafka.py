#!/usr/bin/python3
"""librdkafka half of perf/failover-clients.sh.

Produces one small record every 5 ms (acks=all, enable.idempotence=true) to
one topic with confluent_kafka (librdkafka) and prints one line per record
once its delivery report arrives:

    <produce unix nanos> <ack unix nanos> <ok|err:MESSAGE>

Stops producing after --duration or at SIGINT/SIGTERM, then flushes for up
to --drain seconds; records still undelivered then are reported as errors.

Run it with the Debian interpreter (/usr/bin/python3) and the Debian
package python3-confluent-kafka.
"""

import argparse
import signal
import sys
import time

from confluent_kafka import Producer

# Gap between two records, in seconds.
INTERVAL = 0.005

# Settings both variants share: acks=all, idempotence, and a delivery timeout
# so large that nothing fails inside one cycle.
BASE = {
    "acks": "all",
    "enable.idempotence": True,
    "message.timeout.ms": 120000,
}

# Fast failover: bound how long a produce request may hang on a dead or
# paused leader (socket.timeout.ms caps the client-side wait of every
# request, 60000 by default; request.timeout.ms is only the broker-side ack
# timeout sent in the ProduceRequest, 30000 by default) and re-ask for
# metadata quickly once the leader is gone. Mirrors franz-go's fast settings
# (2 s broker-side produce timeout, 3 s on the client).
#
# socket.connection.setup.timeout.ms (30000 by default) matters when the
# paused leader was the only broker the client was connected to: after the
# request timeout librdkafka finds no usable broker for its "broker down"
# metadata refresh, reconnects to the paused leader (the kernel still
# accepts the TCP connection) and waits for its ApiVersion answer; only when
# that connection setup times out does it refresh metadata through another
# broker and move to the new leader.
FAST = {
    "socket.timeout.ms": 3000,
    "request.timeout.ms": 2000,
    "socket.connection.setup.timeout.ms": 1000,
    "topic.metadata.refresh.fast.interval.ms": 100,
    "retry.backoff.ms": 100,
}


def settings(fast):
    """Return the librdkafka configuration without bootstrap.servers."""
    conf = dict(BASE)
    if fast:
        conf.update(FAST)
    return conf


def main():
    """Parse the arguments, produce until told to stop, and drain."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="failover")
    ap.add_argument("--fast", action="store_true", help="fast failover settings: " + ", ".join(f"{k}={v}" for k, v in FAST.items()))
    ap.add_argument("--duration", type=float, default=30.0, help="seconds to produce")
    ap.add_argument("--drain", type=float, default=60.0, help="seconds to wait for records in flight afterwards")
    ap.add_argument("--print-settings", action="store_true", help="print the settings in use and exit")
    ap.add_argument("--debug", default="", help="librdkafka debug contexts, e.g. broker,topic,metadata,eos (logged to stderr)")
    args = ap.parse_args()

    conf = settings(args.fast)
    if args.print_settings:
        print(" ".join(f"{k}={v}" for k, v in conf.items()))
        return
    conf["bootstrap.servers"] = args.brokers
    if args.debug:
        conf["debug"] = args.debug
    conf["error_cb"] = lambda err: print(f"failover_rdkafka: client error: {err}", file=sys.stderr, flush=True)

    stopping = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.append(True))

    out = sys.stdout
    pending = [0]

    def report(produced):
        """Return a delivery callback that prints the line of one record."""

        def cb(err, _msg):
            pending[0] -= 1
            status = "ok" if err is None else "err:" + "_".join(str(err).split())
            out.write(f"{produced} {time.time_ns()} {status}\n")
            out.flush()

        return cb

    p = Producer(conf)
    n = 0
    end = time.monotonic() + args.duration
    nxt = time.monotonic()
    while not stopping and time.monotonic() < end:
        now = time.monotonic()
        if now >= nxt:
            n += 1
            produced = time.time_ns()
            pending[0] += 1
            while True:
                try:
                    p.produce(args.topic, value=b"record %d" % n, on_delivery=report(produced))
                    break
                except BufferError:
                    p.poll(0.01)
            nxt += INTERVAL
        p.poll(min(0.001, max(0.0, nxt - time.monotonic())))

    deadline = time.monotonic() + args.drain
    while pending[0] > 0 and time.monotonic() < deadline:
        p.poll(0.001)
    left = pending[0]
    if left:
        # Records still in the queue: librdkafka fails them at purge.
        p.purge()
        p.flush(1)
    for _ in range(pending[0]):
        out.write(f"0 {time.time_ns()} err:undelivered_after_drain\n")
    out.flush()
    print(f"failover_rdkafka: produced {n} records, {left} undelivered after drain", file=sys.stderr)


if __name__ == "__main__":
    main()
