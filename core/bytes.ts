/**
 * Byte helpers with no Node APIs (usable in the workflow sandbox): UTF-8, strict base64 and base64url.
 * Decoding is strict on purpose: a signature or body that only decodes "leniently" is not the one
 * that was signed.
 */
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const URL_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

function encodeWith(bytes: Uint8Array, alphabet: string, pad: boolean): string {
  let out = '';
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]! + alphabet[(n >> 6) & 63]! + alphabet[n & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i]! << 16;
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]! + (pad ? '==' : '');
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]! + alphabet[(n >> 6) & 63]! + (pad ? '=' : '');
  }
  return out;
}

function decodeWith(text: string, alphabet: string, padded: boolean): Uint8Array | undefined {
  let body = text;
  if (padded) {
    if (text.length % 4 !== 0) return undefined;
    body = text.replace(/={1,2}$/, '');
  } else if (text.includes('=')) return undefined;
  if (body.length % 4 === 1) return undefined;
  const out = new Uint8Array(Math.floor((body.length * 3) / 4));
  let bits = 0;
  let acc = 0;
  let o = 0;
  for (const ch of body) {
    const v = alphabet.indexOf(ch);
    if (v < 0) return undefined;
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
  }
  // Non-zero leftover bits mean a non-canonical encoding of the same bytes: refuse it.
  if (bits > 0 && (acc & ((1 << bits) - 1)) !== 0) return undefined;
  return out.subarray(0, o);
}

export function toBase64(bytes: Uint8Array): string {
  return encodeWith(bytes, ALPHABET, true);
}

export function fromBase64(text: string): Uint8Array | undefined {
  return decodeWith(text, ALPHABET, true);
}

export function toBase64Url(bytes: Uint8Array): string {
  return encodeWith(bytes, URL_ALPHABET, false);
}

export function fromBase64Url(text: string): Uint8Array | undefined {
  return decodeWith(text, URL_ALPHABET, false);
}

export function utf8Encode(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

/** Decode UTF-8, or undefined when the bytes are not valid UTF-8. */
export function utf8Decode(bytes: Uint8Array): string | undefined {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}
