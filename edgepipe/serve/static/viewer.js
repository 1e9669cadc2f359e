// The edgepipe viewer: the pipeline's video over WebRTC, each frame's results drawn over it.
//
// One RTCPeerConnection: a recvonly video transceiver per source (in the order GET /streams
// gives), a data channel of our own (the SCTP m-line; the server opens "results" itself), the
// offer POSTed to /offer once ICE gathering is complete (the server does not trickle).
//
// Results meet their frame through the sync message (edgepipe.serve.messages): with the RTP
// timestamp rtp0 of the first frame shown on a track, a frame's pts = first_pts_90k + (rtp - rtp0)
// mod 2**32, and the frame shows the latest detections with pts_90k <= its pts. Without
// requestVideoFrameCallback's rtpTimestamp it shows the latest detections.
//
// window.edgepipeViewer is a read-only snapshot of what the page received and showed (tests).
"use strict";

(function () {
  const TOKEN = new URLSearchParams(location.search).get("token");
  const SCHEMA_VERSION = 1;
  const MAX_DETECTIONS = 120;  // per source: a few seconds of results waiting for their frame
  const MAX_BOXES = 256;  // drawn per frame
  const MAX_EVENTS = 50;
  const MAX_TOKEN_LINES = 40;
  const MAX_LINE_CHARS = 2000;
  const MAX_KINDS = 32;  // distinct message kinds counted
  const STALE_90K = 2 * 90000;  // results older than their frame by this much are not drawn
  const BACKOFF_MS = [1000, 2000, 4000, 8000, 15000, 30000];
  const GATHER_TIMEOUT_MS = 5000;
  const DISCONNECTED_GRACE_MS = 4000;  // "disconnected" may recover by itself; "failed" does not

  const $ = (id) => document.getElementById(id);
  const tiles = new Map();  // source -> Tile
  const status = { connection: "new", connects: 0, attempts: 0, messages: {}, ignored: 0, malformed: 0,
    disconnects: 0, sourceStates: {}, tokenLines: 0, events: 0, lastError: null, viewers: null, limit: null };

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function stateBadge(node, state) {
    node.textContent = state;
    node.className = `state ${String(state).replace(/[^a-z]/g, "")}`;
  }

  class HttpError extends Error {}

  async function api(path, init = {}) {
    const headers = { ...(init.headers || {}) };
    if (TOKEN) headers.Authorization = `Bearer ${TOKEN}`;
    const response = await fetch(path, { ...init, headers, cache: "no-store", credentials: "omit" });
    if (!response.ok) {
      throw new HttpError(`${path}: HTTP ${response.status} ${(await response.text()).slice(0, 200)}`);
    }
    return response.json();
  }

  const finite = (x) => typeof x === "number" && Number.isFinite(x);
  const colours = ["#ff4d4d", "#4dd2ff", "#ffd24d", "#7dff4d", "#ff4dd2", "#b84dff"];
  function colour(label) {
    let h = 0;
    for (const c of String(label)) h = (h * 31 + c.charCodeAt(0)) >>> 0;
    return colours[h % colours.length];
  }

  class Tile {
    constructor(source) {
      this.source = source;
      this.root = el("div", "tile");
      const screen = el("div", "screen");
      this.video = el("video");
      Object.assign(this.video, { muted: true, autoplay: true, playsInline: true });
      this.canvas = el("canvas");
      this.notice = el("div", "notice", "no video yet");
      screen.append(this.video, this.canvas, this.notice);
      const stats = el("div", "stats");
      this.fields = {};
      stats.append(el("span", "name", source));
      for (const [key, label] of [["state", ""], ["fps", "fps"], ["latency", "pipeline"],
        ["c2d", "capture→display (same clock)"], ["boxes", "boxes"]]) {
        const span = el("span");
        this.fields[key] = el("span", "", "–");
        if (label) span.append(`${label} `);
        span.append(this.fields[key]);
        stats.append(span);
      }
      this.root.append(screen, stats);
      this.stats = { framesPresented: 0, fps: 0, lastBoxCount: null, lastBoxes: [], drawnPts: null,
        framePts: null, matchedByPts: 0, matchedLatest: 0, pipelineLatencyMs: null,
        captureToDisplayMs: null, videoWidth: 0, videoHeight: 0, video: "no video yet" };
      this.window = { t: performance.now(), frames: 0 };
      this.shownAt = 0;
      this.live = false;
      this.reset();
      this.showState();
      if ("requestVideoFrameCallback" in this.video) {
        const onFrame = (now, meta) => { this.frame(meta); this.video.requestVideoFrameCallback(onFrame); };
        this.video.requestVideoFrameCallback(onFrame);
      } else {
        const tick = () => { if (this.video.readyState >= 2) this.frame(null); requestAnimationFrame(tick); };
        requestAnimationFrame(tick);
      }
    }

    reset() {  // a new connection: a new RTP clock and a new sync
      this.detections = [];
      this.firstPts = null;
      this.rtp0 = null;
    }

    attach(track) {
      this.reset();
      this.live = true;
      this.video.srcObject = new MediaStream([track]);
      this.video.play().catch(() => {});  // autoplay of muted video is allowed; retried on frames
    }

    disconnected() {
      this.live = false;
      this.stats.video = "disconnected";
      this.notice.textContent = "disconnected";
      this.notice.hidden = false;
      this.clear();
    }

    addDetections(m) {
      this.detections.push(m);
      if (this.detections.length > MAX_DETECTIONS) this.detections.splice(0, this.detections.length - MAX_DETECTIONS);
    }

    frame(meta) {
      if (!this.live) return;  // a frame still shown from a connection that ended
      const v = this.video;
      const s = this.stats;
      s.framesPresented += 1;
      s.videoWidth = v.videoWidth;
      s.videoHeight = v.videoHeight;
      if (s.video !== "playing") {
        s.video = "playing";
        this.notice.hidden = true;
      }
      let pts = null;
      if (meta && finite(meta.rtpTimestamp)) {
        if (this.rtp0 === null) this.rtp0 = meta.rtpTimestamp;
        if (this.firstPts !== null) pts = this.firstPts + ((meta.rtpTimestamp - this.rtp0) >>> 0);
      }
      s.framePts = pts;
      let chosen = null;
      if (pts !== null) {
        for (let i = this.detections.length - 1; i >= 0; i--) {
          if (this.detections[i].pts_90k <= pts) { chosen = this.detections[i]; break; }
        }
        if (chosen && pts - chosen.pts_90k > STALE_90K) chosen = null;
        if (chosen) s.matchedByPts += 1;
      } else if (this.detections.length) {
        chosen = this.detections[this.detections.length - 1];
        s.matchedLatest += 1;
      }
      this.draw(chosen);
      this.countFps();
    }

    countFps() {
      const now = performance.now();
      this.window.frames += 1;
      if (now - this.window.t >= 1000) {
        this.stats.fps = Math.round((this.window.frames * 10000) / (now - this.window.t)) / 10;
        this.window = { t: now, frames: 0 };
      }
      if (now - this.shownAt >= 250) {
        this.shownAt = now;
        const s = this.stats;
        this.fields.fps.textContent = s.fps.toFixed(1);
        this.fields.latency.textContent = s.pipelineLatencyMs === null ? "–" : `${s.pipelineLatencyMs.toFixed(0)} ms`;
        this.fields.c2d.textContent = s.captureToDisplayMs === null ? "–" : `${s.captureToDisplayMs.toFixed(0)} ms`;
        this.fields.boxes.textContent = s.lastBoxCount === null ? "–" : String(s.lastBoxCount);
      }
    }

    showState() {
      const st = status.sourceStates[this.source];
      stateBadge(this.fields.state, st ? st.state : "state unknown");
      this.fields.state.title = st && st.reason ? st.reason : "";
    }

    clear() {
      const ctx = this.canvas.getContext("2d");
      ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    }

    draw(m) {
      const v = this.video;
      const c = this.canvas;
      const ratio = window.devicePixelRatio || 1;
      const cw = Math.round(c.clientWidth * ratio);
      const ch = Math.round(c.clientHeight * ratio);
      if (c.width !== cw || c.height !== ch) Object.assign(c, { width: cw, height: ch });
      const ctx = c.getContext("2d");
      ctx.clearRect(0, 0, cw, ch);
      const s = this.stats;
      if (!m) { s.lastBoxCount = null; return; }
      s.drawnPts = m.pts_90k;
      s.lastBoxCount = m.boxes.length;
      s.lastBoxes = m.boxes.slice(0, 8);
      s.pipelineLatencyMs = finite(m.latency_ms) ? m.latency_ms : null;
      s.captureToDisplayMs = finite(m.t_ms) ? Date.now() - m.t_ms : null;
      if (!v.videoWidth || !v.videoHeight) return;
      // The video's picture inside the element (object-fit: contain), then the message's w x h onto it.
      const scale = Math.min(cw / v.videoWidth, ch / v.videoHeight);
      const pw = v.videoWidth * scale;
      const ph = v.videoHeight * scale;
      const ox = (cw - pw) / 2;
      const oy = (ch - ph) / 2;
      const sx = pw / m.w;
      const sy = ph / m.h;
      ctx.lineWidth = Math.max(2, 2 * ratio);
      ctx.font = `${Math.round(13 * ratio)}px system-ui, sans-serif`;
      ctx.textBaseline = "bottom";
      for (const b of m.boxes.slice(0, MAX_BOXES)) {
        const [x1, y1, x2, y2, score, label, track] = b;
        const x = ox + x1 * sx;
        const y = oy + y1 * sy;
        const text = `${label} ${score.toFixed(2)}${track === null || track === undefined ? "" : ` #${track}`}`;
        ctx.strokeStyle = ctx.fillStyle = colour(label);
        ctx.strokeRect(x, y, (x2 - x1) * sx, (y2 - y1) * sy);
        const tw = ctx.measureText(text).width + 6 * ratio;
        const th = 16 * ratio;
        const ty = y - th < 0 ? y + th : y;
        ctx.fillRect(x - ctx.lineWidth / 2, ty - th, tw, th);
        ctx.fillStyle = "#000";
        ctx.fillText(text, x + 3 * ratio, ty - 2 * ratio);
      }
    }
  }

  // Detections fields are checked here so that drawing cannot throw on a server's mistake.
  function validDetections(m) {
    if (typeof m.source !== "string" || !finite(m.pts_90k) || !(m.w > 0) || !(m.h > 0) || !Array.isArray(m.boxes)) {
      return false;
    }
    m.boxes = m.boxes.filter((b) => Array.isArray(b) && b.length >= 6 && b.slice(0, 5).every(finite));
    return true;
  }

  function addTokens(m) {
    const box = $("tokens");
    const key = `${m.node}/${m.request}`;
    let line = box.lastElementChild;
    if (!line || line.dataset.key !== key) {
      line = el("p");
      line.dataset.key = key;
      line.title = String(m.node);
      box.append(line);
      status.tokenLines += 1;
      while (box.childElementCount > MAX_TOKEN_LINES) box.firstElementChild.remove();
    }
    line.textContent = (line.textContent + String(m.text ?? "")).slice(-MAX_LINE_CHARS);
    box.scrollTop = box.scrollHeight;
  }

  function addEvent(m) {
    const list = $("events");
    const item = el("li");
    item.append(el("span", "what", `${m.node ?? ""} ${m.what ?? ""}`.trim()), String(m.text ?? "").slice(0, MAX_LINE_CHARS));
    item.title = new Date().toLocaleTimeString();
    list.prepend(item);
    status.events += 1;
    while (list.childElementCount > MAX_EVENTS) list.lastElementChild.remove();
  }

  function onMessage(data) {
    let m;
    try {
      if (!(data instanceof ArrayBuffer)) throw new Error("not binary");
      m = window.edgepipeMsgpack.decode(data);
      if (m === null || typeof m !== "object" || Array.isArray(m)) throw new Error("not a map");
    } catch (err) {
      status.malformed += 1;
      return;
    }
    if (m.v !== SCHEMA_VERSION) { status.ignored += 1; return; }
    const kind = typeof m.kind === "string" ? m.kind : "?";
    if (kind in status.messages || Object.keys(status.messages).length < MAX_KINDS) {
      status.messages[kind] = (status.messages[kind] || 0) + 1;
    }
    const tile = typeof m.source === "string" ? tiles.get(m.source) : undefined;
    if (kind === "detections") {
      if (!validDetections(m)) { status.malformed += 1; return; }
      if (tile) tile.addDetections(m);
    } else if (kind === "sync") {
      if (tile && finite(m.first_pts_90k)) tile.firstPts = m.first_pts_90k;
    } else if (kind === "token") {
      addTokens(m);
    } else if (kind === "event") {
      addEvent(m);
    } else if (kind === "source_state") {
      const source = typeof m.source === "string" ? m.source : String(m.node);
      if (source in status.sourceStates || Object.keys(status.sourceStates).length < MAX_KINDS) {
        status.sourceStates[source] = { state: String(m.state), reason: m.reason ? String(m.reason) : "" };
      }
      if (tile) tile.showState();
    }  // other kinds: counted, not shown
  }

  function setConnection(state, detail) {
    status.connection = state;
    stateBadge($("connection"), state);
    $("connection").title = detail || "";
  }

  function buildTiles(sources) {
    const same = sources.length === tiles.size && sources.every((s) => tiles.has(s));
    if (same) return;
    tiles.clear();
    const section = $("streams");
    section.replaceChildren();
    if (!sources.length) section.append(el("p", "", "this pipeline streams no video"));
    for (const source of sources) {
      const tile = new Tile(source);
      tiles.set(source, tile);
      section.append(tile.root);
    }
  }

  function gathered(pc) {
    if (pc.iceGatheringState === "complete") return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, GATHER_TIMEOUT_MS);  // offer what was gathered
      pc.addEventListener("icegatheringstatechange", () => {
        if (pc.iceGatheringState === "complete") { clearTimeout(timer); resolve(); }
      });
    });
  }

  let generation = 0;
  let pc = null;
  let retry = null;
  let graceTimer = null;

  function teardown() {
    clearTimeout(graceTimer);
    if (pc) { pc.onconnectionstatechange = null; pc.ondatachannel = null; pc.close(); pc = null; }
  }

  function fail(gen, reason) {
    if (gen !== generation) return;  // an older connection's news
    generation += 1;
    teardown();
    status.disconnects += 1;
    status.lastError = String(reason).slice(0, 300);
    setConnection("disconnected", status.lastError);
    for (const tile of tiles.values()) tile.disconnected();
    const delay = BACKOFF_MS[Math.min(status.attempts, BACKOFF_MS.length) - 1] || BACKOFF_MS[0];
    clearTimeout(retry);
    retry = setTimeout(connect, delay);
  }

  async function connect() {
    const gen = ++generation;
    status.attempts += 1;
    setConnection("connecting");
    try {
      const info = await api("streams");
      status.viewers = info.viewers;
      status.limit = info.limit;
      $("viewers").textContent = `viewers ${info.viewers}/${info.limit}`;
      const sources = Array.isArray(info.sources) ? info.sources.map(String) : [];
      buildTiles(sources);
      if (!info.limit) throw new Error("this pipeline streams no video");
      const peer = pc = new RTCPeerConnection({ iceServers: [] });
      const transceivers = sources.map(() => peer.addTransceiver("video", { direction: "recvonly" }));
      peer.createDataChannel("client");
      sources.forEach((source, i) => tiles.get(source).attach(transceivers[i].receiver.track));
      peer.ondatachannel = (event) => {
        if (event.channel.label !== "results") return;
        event.channel.binaryType = "arraybuffer";
        event.channel.onmessage = (e) => onMessage(e.data);
        // The server ends a viewer by closing its peer: the channel says so at once, the peer
        // connection only once ICE consent runs out (seconds).
        event.channel.onclose = () => fail(gen, "the server closed the results channel");
      };
      peer.onconnectionstatechange = () => {
        const state = peer.connectionState;
        clearTimeout(graceTimer);
        if (state === "connected") {
          status.connects += 1;
          status.attempts = 0;
          setConnection("connected");
        } else if (state === "failed" || state === "closed") {
          fail(gen, `peer connection ${state}`);
        } else if (state === "disconnected") {
          setConnection("disconnected", "waiting for the connection to come back");
          graceTimer = setTimeout(() => fail(gen, "peer connection disconnected"), DISCONNECTED_GRACE_MS);
        }
      };
      await peer.setLocalDescription(await peer.createOffer());
      await gathered(peer);
      if (gen !== generation) return;
      const answer = await api("offer", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ sdp: peer.localDescription.sdp, type: "offer" }),
      });
      if (gen !== generation) return;
      await peer.setRemoteDescription({ type: "answer", sdp: answer.sdp });
    } catch (err) {
      fail(gen, err && err.message ? err.message : err);
    }
  }

  function snapshot() {
    const sources = {};
    for (const [name, tile] of tiles) sources[name] = { ...tile.stats, lastBoxes: tile.stats.lastBoxes.map((b) => [...b]) };
    return JSON.parse(JSON.stringify({ ...status, sources }));
  }

  Object.defineProperty(window, "edgepipeViewer", { get: snapshot, enumerable: true });
  window.addEventListener("pagehide", teardown);
  connect();
})();
