"""The capture server's Prometheus metrics (`display_capture_*`, units in names, counters `_total`).

One registry per server, so tests run several servers in one process. The encoder that ran is a
label on every encode (`vaapi` or `software`), and `display_capture_encoder_info` says which one
clips use now and why (a short cause, never ffmpeg's words), so a fallback to software shows on
a dashboard; the full reason is in the log. Connections held and refused show how near the
listener's bounds the server runs.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "display_capture_requests_total",
            "HTTP requests answered, by endpoint and status code.",
            ["endpoint", "code"],
            registry=self.registry,
        )
        self.encodes = Counter(
            "display_capture_encodes_total",
            "Encodes finished, by kind (still, clip), encoder and result.",
            ["kind", "encoder", "result"],
            registry=self.registry,
        )
        self.encode_seconds = Histogram(
            "display_capture_encode_duration_seconds",
            "Wall time of an encode, from the first frame to the last byte.",
            ["kind", "encoder"],
            buckets=(0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "display_capture_encode_slots_used",
            "Encode slots held now: one per still or clip being encoded.",
            registry=self.registry,
        )
        self.max_encodes = Gauge(
            "display_capture_encode_slots",
            "Encode slots; a request that finds none free gets 429.",
            registry=self.registry,
        )
        self.rejected = Counter(
            "display_capture_rejected_busy_total",
            "Requests answered 429 because the encode bound was reached.",
            registry=self.registry,
        )
        self.frames = Counter(
            "display_capture_frames_total",
            "Frames read from the layout module's capture socket.",
            registry=self.registry,
        )
        self.bytes_sent = Counter(
            "display_capture_sent_bytes_total",
            "Encoded bytes sent to clients, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.encoder_info = Gauge(
            "display_capture_encoder_info",
            "1 for the encoder clips use now, with the cause of the choice.",
            ["encoder", "cause"],
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "display_capture_encoder_fallbacks_total",
            "Times clips fell back from VA-API to software (at start or after a failure).",
            registry=self.registry,
        )
        self.reviews = Counter(
            "display_capture_reviews_total",
            "Authorization outcomes: ok, unauthenticated, forbidden, unavailable.",
            ["result"],
            registry=self.registry,
        )
        self.tls_mounted = Gauge(
            "display_capture_tls_mounted_certificate",
            "1 when the mounted certificate is served, 0 while the self-signed one is.",
            registry=self.registry,
        )
        self.connections = Gauge(
            "display_capture_connections",
            "Client connections held now, waiting for TLS or served.",
            registry=self.registry,
        )
        self.connections_refused = Counter(
            "display_capture_connections_refused_total",
            "Connections closed at accept: capacity (every slot busy), source (per-address "
            "bound); or closed early: evicted (oldest idle, to make room), silent (no "
            "ClientHello in time), handshake (failed or too slow).",
            ["reason"],
            registry=self.registry,
        )
        self.unauthenticated_limited = Counter(
            "display_capture_unauthenticated_limited_total",
            "Requests with a token not known good answered 429 because their address "
            "exceeded its rate of token reviews.",
            registry=self.registry,
        )

    def set_encoder(self, encoder: str, cause: str) -> None:
        self.encoder_info.clear()
        self.encoder_info.labels(encoder=encoder, cause=cause).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)
