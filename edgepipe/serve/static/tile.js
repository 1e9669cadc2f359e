// One source's tile of the viewer page: its <video>, a <canvas> over it with the boxes of the
// results of the frame on screen and the box of its motion, and its figures (fps, latencies,
// boxes, motion, state). The video is shown at its own size, or smaller to fit (never larger).
//
// Results meet their frame through the sync message (edgepipe.wire.messages): a frame's pts =
// first_pts_90k + (rtp - rtp_offset - first_pts_90k) mod 2**32 (or, from a server that sends no
// rtp_offset, first_pts_90k + (rtp - rtp0) mod 2**32 with the RTP timestamp rtp0 of the first
// frame shown), and the frame shows the latest detections with pts_90k <= its pts. Without
// requestVideoFrameCallback's rtpTimestamp it shows the latest detections.
//
// Motion (a ``motion`` message, as pipelines/demo.py sends: ``box_xyxy`` around what changed,
// in the frame's pixels, ``w`` x ``h`` when given, else the video's; ``pixels`` changed) comes
// only while something moves, with no pts: the latest is drawn for MOTION_HOLD_MS after it came.
//
// Latency of the frame on screen (one machine, or clocks in sync: the capture time is the
// server's wall clock): its capture time is its own result's t_ms, or the latest result's t_ms
// plus the pts between the two (a camera's pts run with its clock). capture→display ends when
// the frame is expected on screen (the callback's expectedDisplayTime); its browser share
// starts when the frame's last packet arrived (receiveTime, given for WebRTC video). The last
// RECENT frames' figures are kept for the percentiles the page shows and tests read.
"use strict";

(function () {
  const MAX_DETECTIONS = 120;  // a few seconds of results waiting for their frame
  const MAX_BOXES = 256;  // drawn per frame
  const STALE_90K = 2 * 90000;  // results older than their frame by this much are not drawn
  const RECENT = 300;  // frames whose latencies are kept (20 s at 15 fps)
  const MOTION_HOLD_MS = 500;
  const MOTION_COLOUR = "#ffd24d";

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
      this.root = el("div", "tile waiting");  // no picture yet: a placeholder's size
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
        ["c2d", "capture→display (same clock)"], ["browser", "in browser"], ["boxes", "boxes"],
        ["motion", "motion"]]) {
        const span = el("span");
        this.fields[key] = el("span", "", "–");
        if (label) span.append(`${label} `);
        span.append(this.fields[key]);
        stats.append(span);
      }
      this.root.append(screen, stats);
      this.stats = { framesPresented: 0, fps: 0, lastBoxCount: null, lastBoxes: [], drawnPts: null,
        framePts: null, matchedByPts: 0, matchedLatest: 0, pipelineLatencyMs: null,
        captureToDisplayMs: null, browserMs: null, jitterBufferMs: null, decodeMs: null, videoWidth: 0, videoHeight: 0, video: "no video yet",
        recent: { captureToDisplayMs: [], pipelineLatencyMs: [], browserMs: [] },
        motionMessages: 0, motionDrawn: 0, lastMotion: null, motionPixels: null };
      this.window = { t: performance.now(), frames: 0 };
      this.lastPresented = null;
      this.shownAt = 0;
      this.live = false;
      this.reset();
      this.showState(null);
      if ("requestVideoFrameCallback" in this.video) {
        // finally: one bad message must not stop the overlay for the rest of the session
        const onFrame = (now, meta) => {
          try { this.frame(meta); } finally { this.video.requestVideoFrameCallback(onFrame); }
        };
        this.video.requestVideoFrameCallback(onFrame);
      } else {
        const tick = () => {
          try { if (this.video.readyState >= 2) this.frame(null); } finally { requestAnimationFrame(tick); }
        };
        requestAnimationFrame(tick);
      }
    }

    reset() {  // a new connection: a new RTP clock and a new sync
      this.detections = [];
      this.motion = null;
      this.motionAt = 0;
      this.lastPresented = null;
      this.firstPts = null;
      this.rtpOffset = null;
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

    addMotion(m) {
      this.motion = m;
      this.motionAt = performance.now();
      this.stats.motionMessages += 1;
    }

    motionNow() {  // the motion to draw now, or null
      return this.motion && performance.now() - this.motionAt <= MOTION_HOLD_MS ? this.motion : null;
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
        this.root.classList.remove("waiting");
      }
      let pts = null;
      if (meta && finite(meta.rtpTimestamp)) {
        if (this.rtp0 === null) this.rtp0 = meta.rtpTimestamp;
        if (this.firstPts !== null && this.rtpOffset !== null) {
          pts = this.firstPts + ((meta.rtpTimestamp - this.rtpOffset - this.firstPts) >>> 0);
        } else if (this.firstPts !== null) {
          pts = this.firstPts + ((meta.rtpTimestamp - this.rtp0) >>> 0);
        }
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
      this.draw(chosen, this.motionNow());
      this.timeFrame(meta, pts, chosen);
      this.countFps(meta);
    }

    timeFrame(meta, pts, m) {
      const s = this.stats;
      const shown = meta && finite(meta.expectedDisplayTime) ? meta.expectedDisplayTime : performance.now();
      s.browserMs = meta && finite(meta.receiveTime) && meta.receiveTime > 0 ? shown - meta.receiveTime : null;
      s.captureToDisplayMs = null;
      s.pipelineLatencyMs = m && finite(m.latency_ms) ? m.latency_ms : null;
      if (m && finite(m.t_ms)) {
        const captured = m.t_ms + (pts !== null ? (pts - m.pts_90k) / 90 : 0);
        s.captureToDisplayMs = performance.timeOrigin + shown - captured;
      }
      for (const key of ["captureToDisplayMs", "pipelineLatencyMs", "browserMs"]) {
        const list = s.recent[key];
        list.push(s[key]);
        if (list.length > RECENT) list.shift();
      }
    }

    countFps(meta) {
      // presentedFrames counts frames the callback did not see too (it runs once per paint at most)
      const presented = meta && finite(meta.presentedFrames) ? meta.presentedFrames : null;
      const step = presented !== null && this.lastPresented !== null ? presented - this.lastPresented : 1;
      this.lastPresented = presented;
      const now = performance.now();
      this.window.frames += step > 0 && step < 1000 ? step : 1;
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
        this.fields.browser.textContent = s.browserMs === null ? "–" : `${s.browserMs.toFixed(0)} ms`;
        this.fields.browser.title = s.jitterBufferMs === null ? ""
          : `jitter buffer ${s.jitterBufferMs.toFixed(0)} ms, decode ${(s.decodeMs ?? 0).toFixed(1)} ms`;
        this.fields.boxes.textContent = s.lastBoxCount === null ? "–" : String(s.lastBoxCount);
        this.fields.motion.textContent = s.lastMotion === null ? "–"
          : s.motionPixels === null ? "yes" : `${s.motionPixels} px`;
      }
    }

    receiverStats(now, before) {  // inbound-rtp stats now and a second before (or none)
      const delta = (key) => (finite(now[key]) ? now[key] : 0) - (before && finite(before[key]) ? before[key] : 0);
      const emitted = delta("jitterBufferEmittedCount");
      const decoded = delta("framesDecoded");
      this.stats.jitterBufferMs = emitted > 0 ? (1000 * delta("jitterBufferDelay")) / emitted : null;
      this.stats.decodeMs = decoded > 0 ? (1000 * delta("totalDecodeTime")) / decoded : null;
    }

    showState(st) {
      stateBadge(this.fields.state, st ? st.state : "state unknown");
      this.fields.state.title = st && st.reason ? st.reason : "";
    }

    clear() {
      const ctx = this.canvas.getContext("2d");
      ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    }

    // Where the video's picture lies on the canvas, in canvas pixels: inside the video element
    // (object-fit: contain), wherever the layout put that element over the canvas.
    picture(ratio) {
      const v = this.video;
      const vr = v.getBoundingClientRect();
      const cr = this.canvas.getBoundingClientRect();
      const scale = Math.min(vr.width / v.videoWidth, vr.height / v.videoHeight);
      const w = v.videoWidth * scale;
      const h = v.videoHeight * scale;
      return { x: (vr.left - cr.left + (vr.width - w) / 2) * ratio, y: (vr.top - cr.top + (vr.height - h) / 2) * ratio,
        w: w * ratio, h: h * ratio };
    }

    draw(m, motion) {
      const v = this.video;
      const c = this.canvas;
      const ratio = window.devicePixelRatio || 1;
      const cw = Math.round(c.clientWidth * ratio);
      const ch = Math.round(c.clientHeight * ratio);
      if (c.width !== cw || c.height !== ch) Object.assign(c, { width: cw, height: ch });
      const ctx = c.getContext("2d");
      ctx.clearRect(0, 0, cw, ch);
      const s = this.stats;
      s.lastBoxCount = m ? m.boxes.length : null;
      if (m) {
        s.drawnPts = m.pts_90k;
        s.lastBoxes = m.boxes.slice(0, 8);
      }
      s.lastMotion = motion ? motion.box_xyxy.map(Number) : null;
      s.motionPixels = motion && finite(motion.pixels) ? motion.pixels : null;
      if (!v.videoWidth || !v.videoHeight || (!m && !motion)) return;
      const pic = this.picture(ratio);
      ctx.lineWidth = Math.max(2, 2 * ratio);
      ctx.font = `${Math.round(13 * ratio)}px system-ui, sans-serif`;
      ctx.textBaseline = "bottom";
      if (m) {
        // the message's w x h onto the picture
        const [sx, sy] = [pic.w / m.w, pic.h / m.h];
        for (const b of m.boxes.slice(0, MAX_BOXES)) {
          if (!Array.isArray(b) || b.length < 5) continue;  // a box the schema does not know
          const [x1, y1, x2, y2, score] = b.slice(0, 5).map(Number);
          if (![x1, y1, x2, y2, score].every(Number.isFinite)) continue;
          const label = typeof b[5] === "string" ? b[5] : "";
          const track = Number.isInteger(b[6]) ? b[6] : null;
          const text = `${label} ${score.toFixed(2)}${track === null ? "" : ` #${track}`}`;
          this.box(ctx, [pic.x + x1 * sx, pic.y + y1 * sy, (x2 - x1) * sx, (y2 - y1) * sy], text, colour(label), ratio);
        }
      }
      if (motion) {
        const [x1, y1, x2, y2] = s.lastMotion;
        const sx = pic.w / (motion.w > 0 ? motion.w : v.videoWidth);
        const sy = pic.h / (motion.h > 0 ? motion.h : v.videoHeight);
        ctx.setLineDash([6 * ratio, 4 * ratio]);
        this.box(ctx, [pic.x + x1 * sx, pic.y + y1 * sy, (x2 - x1) * sx, (y2 - y1) * sy], "motion", MOTION_COLOUR, ratio);
        ctx.setLineDash([]);
        s.motionDrawn += 1;
      }
    }

    box(ctx, [x, y, w, h], text, fill, ratio) {  // a rectangle with its label above it (below at the top)
      ctx.strokeStyle = ctx.fillStyle = fill;
      ctx.strokeRect(x, y, w, h);
      const tw = ctx.measureText(text).width + 6 * ratio;
      const th = 16 * ratio;
      const ty = y - th < 0 ? y + th : y;
      ctx.fillRect(x - ctx.lineWidth / 2, ty - th, tw, th);
      ctx.fillStyle = "#000";
      ctx.fillText(text, x + 3 * ratio, ty - 2 * ratio);
    }
  }

  Object.defineProperty(window, "edgepipeTile", {
    value: Object.freeze({ Tile, el, stateBadge, finite }), enumerable: true,
  });
})();
