// The edgepipe viewer: the pipeline's video over WebRTC, each frame's results drawn over it.
//
// One RTCPeerConnection: a recvonly video transceiver per source (in the order GET /streams
// gives), a data channel of our own (the SCTP m-line; the server opens "results" itself), the
// offer POSTed to /offer once ICE gathering is complete (the server does not trickle).
//
// Messages of the results channel (edgepipe.wire.messages) go to the source's tile (tile.js:
// detections, motion, sync, source_state) or to the panels (token, event); unknown kinds are
// counted. Why the page is not connected (an HTTP error's status and the server's own words, a
// connection that failed) is shown under the header until it connects again.
//
// window.edgepipeViewer is a read-only snapshot of what the page received and showed (tests).
"use strict";

(function () {
  const TOKEN = new URLSearchParams(location.search).get("token");
  const SCHEMA_VERSION = 1;
  const MAX_EVENTS = 50;
  const MAX_TOKEN_LINES = 40;
  const MAX_LINE_CHARS = 2000;
  const MAX_KINDS = 32;  // distinct message kinds counted
  const BACKOFF_MS = [1000, 2000, 4000, 8000, 15000, 30000];
  const GATHER_TIMEOUT_MS = 5000;
  const DISCONNECTED_GRACE_MS = 4000;  // "disconnected" may recover by itself; "failed" does not

  const { Tile, el, stateBadge, finite } = window.edgepipeTile;
  const $ = (id) => document.getElementById(id);
  const tiles = new Map();  // source -> Tile
  // Keyed by names the server sends: no prototype, so a kind "__proto__" is just a kind.
  const status = { connection: "new", connects: 0, attempts: 0, messages: Object.create(null), ignored: 0,
    malformed: 0, disconnects: 0, sourceStates: Object.create(null), tokenLines: 0, events: 0, lastError: null, viewers: null, limit: null,
    route: null, problem: null };

  class HttpError extends Error {
    constructor(path, status, text) {
      super(`HTTP ${status} from ${path}: ${text}`);
      this.shown = `HTTP ${status}: ${text}`;  // what the page says: the status and the server's words
    }
  }

  async function api(path, init = {}) {
    const headers = { ...(init.headers || {}) };
    if (TOKEN) headers.Authorization = `Bearer ${TOKEN}`;
    const response = await fetch(path, { ...init, headers, cache: "no-store", credentials: "omit" });
    if (!response.ok) {
      throw new HttpError(path, response.status, (await response.text()).trim().slice(0, 200));
    }
    return response.json();
  }

  // Detections fields are checked here so that drawing cannot throw on a server's mistake.
  function validDetections(m) {
    if (typeof m.source !== "string" || !finite(m.pts_90k) || !(m.w > 0) || !(m.h > 0) || !Array.isArray(m.boxes)) {
      return false;
    }
    m.boxes = m.boxes.filter((b) => Array.isArray(b) && b.length >= 6 && b.slice(0, 5).every(finite));
    return true;
  }

  // motion: a box of what changed (box_xyxy, in the frame's pixels), for the source's tile.
  function validMotion(m) {
    return typeof m.source === "string" && Array.isArray(m.box_xyxy) && m.box_xyxy.length === 4
      && m.box_xyxy.every(finite);
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
    } else if (kind === "motion") {
      if (!validMotion(m)) { status.malformed += 1; return; }
      if (tile) tile.addMotion(m);
    } else if (kind === "sync") {
      if (tile && finite(m.first_pts_90k)) {
        tile.firstPts = m.first_pts_90k;
        tile.rtpOffset = finite(m.rtp_offset) ? m.rtp_offset : null;
      }
    } else if (kind === "token") {
      addTokens(m);
    } else if (kind === "event") {
      addEvent(m);
    } else if (kind === "source_state") {
      const source = typeof m.source === "string" ? m.source : String(m.node);
      if (source in status.sourceStates || Object.keys(status.sourceStates).length < MAX_KINDS) {
        status.sourceStates[source] = { state: String(m.state), reason: m.reason ? String(m.reason) : "" };
      }
      if (tile) tile.showState(status.sourceStates[source]);
    }  // other kinds: counted, not shown
  }

  function setConnection(state, detail) {
    status.connection = state;
    stateBadge($("connection"), state);
    $("connection").title = detail || "";
  }

  function showProblem(text) {
    status.problem = text || null;
    $("problem").textContent = text || "";
    $("problem").hidden = !text;
  }

  function showStreams(info) {
    status.viewers = info.viewers;
    status.limit = info.limit;
    $("viewers").textContent = `viewers ${info.viewers}/${info.limit}`;
    return info;
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

  // The addresses of the candidate pair in use (shown in the header's tooltip).
  function route(stats) {
    for (const report of stats.values()) {
      const pair = report.type === "transport" && stats.get(report.selectedCandidatePairId);
      if (pair) {
        const [local, remote] = [stats.get(pair.localCandidateId), stats.get(pair.remoteCandidateId)];
        const found = { local: local ? local.address : null, remote: remote ? remote.address : null };
        $("connection").title = `${found.local} → ${found.remote}`;
        return found;
      }
    }
    return null;
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

  // Every second, each tile's share of the browser's receive path (inbound-rtp stats): what
  // its jitter buffer held a frame and what decoding took, over that second.
  function watchReceivers(gen, peer, sources, transceivers) {
    const last = new Map();
    const timer = setInterval(() => {
      if (gen !== generation || peer.connectionState === "closed") { clearInterval(timer); return; }
      peer.getStats().then((stats) => {
        for (const report of stats.values()) {
          if (report.type !== "inbound-rtp" || report.kind !== "video") continue;
          const i = transceivers.findIndex((t) => t.mid === report.mid);
          const tile = i < 0 ? undefined : tiles.get(sources[i]);
          if (tile) tile.receiverStats(report, last.get(report.mid));
          last.set(report.mid, report);
        }
      }, () => {});
    }, 1000);
  }

  let generation = 0;
  let pc = null;
  let retry = null;
  let graceTimer = null;

  function teardown() {
    clearTimeout(graceTimer);
    if (pc) { pc.onconnectionstatechange = null; pc.ondatachannel = null; pc.close(); pc = null; }
  }

  function fail(gen, reason) {  // reason: an Error (an HttpError says its status) or a string
    if (gen !== generation) return;  // an older connection's news
    generation += 1;
    teardown();
    status.disconnects += 1;
    const text = String(reason && reason.message ? reason.message : reason);
    status.lastError = text.slice(0, 300);
    setConnection("disconnected", status.lastError);
    for (const tile of tiles.values()) tile.disconnected();
    const delay = BACKOFF_MS[Math.min(status.attempts, BACKOFF_MS.length) - 1] || BACKOFF_MS[0];
    const shown = reason instanceof HttpError ? reason.shown : text;
    showProblem(`${shown.slice(0, 300)}. Trying again in ${Math.round(delay / 1000)} s.`);
    clearTimeout(retry);
    retry = setTimeout(connect, delay);
  }

  async function connect() {
    const gen = ++generation;
    status.attempts += 1;
    setConnection("connecting");
    try {
      const info = showStreams(await api("streams"));
      const sources = Array.isArray(info.sources) ? info.sources.map(String) : [];
      buildTiles(sources);
      if (!info.limit) throw new Error("this pipeline streams no video");
      const peer = pc = new RTCPeerConnection({ iceServers: [] });
      const transceivers = sources.map(() => peer.addTransceiver("video", { direction: "recvonly" }));
      // Live video a person waits for: the least playout delay the jitter seen allows (Chromium
      // otherwise holds frames for a smooth playout, tens of milliseconds more).
      for (const t of transceivers) if ("jitterBufferTarget" in t.receiver) t.receiver.jitterBufferTarget = 0;
      peer.createDataChannel("client");
      sources.forEach((source, i) => tiles.get(source).attach(transceivers[i].receiver.track));
      watchReceivers(gen, peer, sources, transceivers);
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
          showProblem(null);
          api("streams").then(showStreams, () => {});  // the viewer count, this page included
          peer.getStats().then((stats) => { status.route = route(stats); }, () => {});
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
      fail(gen, err);
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
