// A small msgpack decoder for the viewer's data channel (edgepipe.wire.messages).
//
// edgepipeMsgpack.decode(bytes) -> value, for an ArrayBuffer or Uint8Array holding exactly one
// msgpack value. Supported: nil, bool, ints (64-bit ones as Number, exact up to 2**53), float
// 32/64, str (UTF-8, checked), bin (a Uint8Array copy), array, map (a plain object; string or
// number keys). Anything else throws an Error: ext types, the reserved 0xc1 byte, truncated
// input, invalid UTF-8, trailing bytes, nesting deeper than MAX_DEPTH.
"use strict";

(function () {
  const MAX_DEPTH = 64;
  const utf8 = new TextDecoder("utf-8", { fatal: true });

  class Reader {
    constructor(bytes) {
      this.bytes = bytes;
      this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      this.pos = 0;
    }

    need(n) {
      if (this.pos + n > this.bytes.length) {
        throw new Error(`msgpack: truncated (need ${n} bytes at ${this.pos} of ${this.bytes.length})`);
      }
      const at = this.pos;
      this.pos += n;
      return at;
    }

    u8() { return this.view.getUint8(this.need(1)); }
    u16() { return this.view.getUint16(this.need(2)); }
    u32() { return this.view.getUint32(this.need(4)); }

    u64() {
      const at = this.need(8);
      return this.view.getUint32(at) * 4294967296 + this.view.getUint32(at + 4);
    }

    i64() {
      const at = this.need(8);
      return this.view.getInt32(at) * 4294967296 + this.view.getUint32(at + 4);
    }

    str(n) {
      const at = this.need(n);
      try {
        return utf8.decode(this.bytes.subarray(at, at + n));
      } catch (err) {
        throw new Error(`msgpack: invalid UTF-8 in a string at ${at}`);
      }
    }

    bin(n) {
      const at = this.need(n);
      return this.bytes.slice(at, at + n);
    }

    // A container's length must fit what is left (each item is at least one byte): a forged
    // length cannot make the decoder allocate or loop beyond the message.
    count(n, perItem) {
      if (n * perItem > this.bytes.length - this.pos) {
        throw new Error(`msgpack: a container of ${n} items does not fit the message`);
      }
      return n;
    }

    array(n, depth) {
      this.count(n, 1);
      const out = new Array(n);
      for (let i = 0; i < n; i++) out[i] = this.value(depth + 1);
      return out;
    }

    map(n, depth) {
      this.count(n, 2);
      const out = {};
      for (let i = 0; i < n; i++) {
        const key = this.value(depth + 1);
        if (typeof key !== "string" && typeof key !== "number") {
          throw new Error(`msgpack: a map key must be a string or a number, not ${typeof key}`);
        }
        // defineProperty, not out[key] = ...: a key "__proto__" is data, not a prototype.
        Object.defineProperty(out, String(key), {
          value: this.value(depth + 1), enumerable: true, writable: true, configurable: true,
        });
      }
      return out;
    }

    value(depth) {
      if (depth > MAX_DEPTH) throw new Error(`msgpack: nested deeper than ${MAX_DEPTH}`);
      const b = this.u8();
      if (b <= 0x7f) return b;
      if (b >= 0xe0) return b - 0x100;
      if (b >= 0xa0 && b <= 0xbf) return this.str(b & 0x1f);
      if (b >= 0x90 && b <= 0x9f) return this.array(b & 0x0f, depth);
      if (b >= 0x80 && b <= 0x8f) return this.map(b & 0x0f, depth);
      switch (b) {
        case 0xc0: return null;
        case 0xc2: return false;
        case 0xc3: return true;
        case 0xc4: return this.bin(this.u8());
        case 0xc5: return this.bin(this.u16());
        case 0xc6: return this.bin(this.u32());
        case 0xca: return this.view.getFloat32(this.need(4));
        case 0xcb: return this.view.getFloat64(this.need(8));
        case 0xcc: return this.u8();
        case 0xcd: return this.u16();
        case 0xce: return this.u32();
        case 0xcf: return this.u64();
        case 0xd0: return this.view.getInt8(this.need(1));
        case 0xd1: return this.view.getInt16(this.need(2));
        case 0xd2: return this.view.getInt32(this.need(4));
        case 0xd3: return this.i64();
        case 0xd9: return this.str(this.u8());
        case 0xda: return this.str(this.u16());
        case 0xdb: return this.str(this.u32());
        case 0xdc: return this.array(this.u16(), depth);
        case 0xdd: return this.array(this.u32(), depth);
        case 0xde: return this.map(this.u16(), depth);
        case 0xdf: return this.map(this.u32(), depth);
        default:  // 0xc1 (never used), ext 0xc7-0xc9 and 0xd4-0xd8
          throw new Error(`msgpack: unsupported type byte 0x${b.toString(16)} at ${this.pos - 1}`);
      }
    }
  }

  function decode(data) {
    let bytes;
    if (data instanceof Uint8Array) bytes = data;
    else if (data instanceof ArrayBuffer) bytes = new Uint8Array(data);
    else throw new Error("msgpack: expected an ArrayBuffer or a Uint8Array");
    const reader = new Reader(bytes);
    const value = reader.value(0);
    if (reader.pos !== bytes.length) {
      throw new Error(`msgpack: ${bytes.length - reader.pos} bytes after the value`);
    }
    return value;
  }

  Object.defineProperty(window, "edgepipeMsgpack", { value: Object.freeze({ decode }), enumerable: true });
})();
