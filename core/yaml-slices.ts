import { parse as parseYaml, parseDocument } from 'yaml';

/**
 * A large YAML document parsed in slices, for the same value as `parse(text)` of the yaml package: a
 * 100,000-device inventory parsed whole builds the syntax tree of every device at once (about 10 s and
 * 800 MB at 100,000 devices); in slices of a few hundred devices, each tree is garbage before
 * the next is built.
 *
 * Only a plain document is sliced: a block mapping at the root whose entries start in column 0, where a
 * long block sequence under a key is cut between its items. Anything the slices could read differently
 * from the whole (anchors and aliases, tags, directives, several documents, a key in two slices, CR line
 * ends) and any slice that is not clean (an error, a warning, not the shape expected) makes it parse the
 * whole text once, as before: the errors and warnings a user sees are always the whole document's.
 */
export function parseYamlInSlices(text: string, sliceBytes = SLICE_BYTES): unknown {
  const sliced = text.length > sliceBytes ? slicedValue(text, sliceBytes) : undefined;
  return sliced !== undefined ? sliced.value : parseYaml(text);
}

/** About a few hundred inventory devices: big enough that the per-parse cost vanishes, small enough to stay in the young generation. */
const SLICE_BYTES = 16 * 1024;

/**
 * Anything that may tie one part of the document to another, or change how all of it is read: anchors,
 * aliases and tags (at the start of a node), directives and document markers (at the start of a line),
 * explicit keys (`? `), CR line ends, tabs, and `__proto__` (copying it from a slice would go through the prototype setter).
 */
const NOT_SLICEABLE = /(^|[\s[{,])[&*!]|^%|^---|^\.\.\.|^ *[?:]( |$)|\r|\t|__proto__/m;

/** A slice of the text and what it holds. */
type Slice =
  | { kind: 'entries'; start: number; end: number }
  /** A key whose value is a block sequence, with its first items. */
  | { kind: 'head'; start: number; end: number; items: number }
  /** More items of the sequence begun by the last head. */
  | { kind: 'items'; start: number; end: number; items: number };

/** The value from slices, or undefined when the document is not one this reads like the whole (the caller parses the whole). */
export function slicedValue(text: string, sliceBytes = SLICE_BYTES): { value: Record<string, unknown> } | undefined {
  if (NOT_SLICEABLE.test(text)) return undefined;
  const slices = slicesOf(text, sliceBytes);
  if (!slices) return undefined;
  const value: Record<string, unknown> = {};
  let sequence: unknown[] | undefined;
  for (const slice of slices) {
    const source = text.slice(slice.start, slice.end);
    const plain = slice.kind === 'items' ? plainItems(source) : undefined;
    const part = plain ? { value: plain } : cleanParse(source);
    if (part === undefined) return undefined;
    if (slice.kind === 'items') {
      if (!sequence || !Array.isArray(part.value) || part.value.length !== slice.items) return undefined;
      for (const item of part.value) sequence.push(item);
      continue;
    }
    const entries = part.value;
    if (entries === null || typeof entries !== 'object' || Array.isArray(entries)) return undefined;
    const keys = Object.keys(entries);
    for (const key of keys) {
      // A key in two slices: the whole document refuses it, with its own message.
      if (Object.hasOwn(value, key)) return undefined;
      value[key] = (entries as Record<string, unknown>)[key];
    }
    if (slice.kind === 'head') {
      sequence = keys.length === 1 ? (value[keys[0]!] as unknown[]) : undefined;
      if (!Array.isArray(sequence) || sequence.length !== slice.items) return undefined;
    } else sequence = undefined;
  }
  return { value };
}

/**
 * A key, and a plain value that YAML's core schema reads as a string: it starts with a letter and holds
 * letters, digits, ".", "_", "-" and "/" only (no ": ", " #" or quotes), and is none of the words the
 * schema reads as a boolean or null. An IPv4 address is a string too (two dots are no float).
 */
const PLAIN_PAIR = /^([A-Za-z_][A-Za-z0-9_]*): ([A-Za-z][A-Za-z0-9._/-]*|\d{1,3}(?:\.\d{1,3}){3}|0|[1-9]\d{0,8})$/;
const NOT_A_STRING = new Set(['true', 'True', 'TRUE', 'false', 'False', 'FALSE', 'null', 'Null', 'NULL']);

/**
 * The commonest slice of a large inventory read without the YAML parser (which costs some 35 µs a
 * device): sequence items that are mappings of `key: value` lines, each value a plain string or a
 * small whole number, or a mapping of such lines one level down (`labels:`). Any other line, a repeated
 * key, or a value the schema could read otherwise: undefined, and the YAML parser reads the slice
 * (core/yaml-slices.test.ts holds the two to the same value).
 */
export function plainItems(source: string): PlainItem[] | undefined {
  const items: PlainItem[] = [];
  let item: PlainItem | undefined;
  /** The mapping a `key:` line of the item opened (`labels:`), its lines two spaces deeper. */
  let nested: Record<string, PlainValue> | undefined;
  let indent = -1;
  let start = 0;
  while (start < source.length) {
    const newline = source.indexOf('\n', start);
    const end = newline === -1 ? source.length : newline;
    let at = start;
    while (at < end && source.charCodeAt(at) === 32) at++;
    const column = at - start;
    const opens = source.charCodeAt(at) === 45 && source.charCodeAt(at + 1) === 32; // "- "
    const line = source.slice(opens ? at + 2 : at, end);
    if (item && nested && column === indent + 4 && !opens) {
      if (!plainPair(line, nested)) return undefined;
      start = end + 1;
      continue;
    }
    // A nested mapping with no line of its own would be null: the parser reads that.
    if (nested && Object.keys(nested).length === 0) return undefined;
    nested = undefined;
    if (opens) {
      if (indent === -1) indent = column;
      else if (column !== indent) return undefined;
      item = {};
      items.push(item);
      if (!plainPair(line, item)) return undefined;
    } else {
      if (!item || column !== indent + 2) return undefined;
      const opener = NESTED_KEY.exec(line);
      if (opener) {
        if (Object.hasOwn(item, opener[1]!)) return undefined;
        nested = {};
        item[opener[1]!] = nested;
      } else if (!plainPair(line, item)) return undefined;
    }
    start = end + 1;
  }
  if (nested && Object.keys(nested).length === 0) return undefined;
  return items;
}

type PlainValue = string | number;
type PlainItem = Record<string, PlainValue | Record<string, PlainValue>>;

/** A key alone on its line (`labels:`), opening a mapping of plain pairs below it. */
const NESTED_KEY = /^([A-Za-z_][A-Za-z0-9_]*):$/;

/** A plain `key: value` line added to `into`; false for any other line, or a key already there. */
function plainPair(line: string, into: Record<string, unknown>): boolean {
  const pair = PLAIN_PAIR.exec(line);
  if (!pair) return false;
  const [, key, text] = pair as unknown as [string, string, string];
  if (Object.hasOwn(into, key) || NOT_A_STRING.has(text)) return false;
  into[key] = /^\d+$/.test(text) ? Number(text) : text;
  return true;
}

/** The value of a slice that parses without an error or a warning; undefined otherwise. */
function cleanParse(source: string): { value: unknown } | undefined {
  const doc = parseDocument(source);
  if (doc.errors.length || doc.warnings.length) return undefined;
  return { value: doc.toJS() };
}

interface Line {
  start: number;
  /** The index after its newline (or the end of the text). */
  end: number;
  indent: number;
  /** Blank, or only a comment. */
  blank: boolean;
  /** A block sequence item at `indent`: "-" then a space or the end of the line. */
  item: boolean;
}

function lineAt(text: string, start: number): Line {
  const newline = text.indexOf('\n', start);
  const end = newline === -1 ? text.length : newline + 1;
  let indent = start;
  while (indent < end && text.charCodeAt(indent) === 32) indent++;
  const first = text[indent];
  const after = text[indent + 1];
  return {
    start,
    end,
    indent: indent - start,
    blank: indent >= end || first === '\n' || first === '#',
    item: first === '-' && (after === ' ' || after === '\n' || after === undefined),
  };
}

/**
 * The document cut into slices at line starts: runs of root entries (a root entry starts in column 0)
 * cut every `sliceBytes`, and a root entry whose value is a block sequence cut between its items every
 * `sliceBytes`. Undefined when a line does not fit that shape (the whole is parsed instead).
 */
function slicesOf(text: string, sliceBytes: number): Slice[] | undefined {
  const slices: Slice[] = [];
  let runStart = 0;
  /** Whether the run holds more than blank and comment lines (one that holds only those is dropped). */
  let runHasContent = false;
  const closeRun = (end: number) => {
    if (runHasContent) slices.push({ kind: 'entries', start: runStart, end });
    runStart = end;
    runHasContent = false;
  };
  let at = 0;
  while (at < text.length) {
    const line = lineAt(text, at);
    at = line.end;
    if (line.blank) continue;
    if (line.indent > 0 || line.item) {
      runHasContent = true;
      continue;
    }
    // A root entry's key line: a run long enough ends before it.
    if (line.start - runStart >= sliceBytes) closeRun(line.start);
    const runBefore = runHasContent;
    runHasContent = true;
    // Is its value a block sequence (the next line that is not blank an item)?
    let first: Line | undefined;
    for (let next = at; next < text.length && !first; ) {
      const l = lineAt(text, next);
      if (!l.blank) first = l;
      next = l.end;
    }
    if (!first?.item) continue;
    const seqIndent = first.indent;
    // Its items, cut every sliceBytes; the sequence ends at the next root entry (or the text's end).
    const cuts: Array<{ start: number; items: number }> = [{ start: line.start, items: 0 }];
    let end = first.start;
    while (end < text.length) {
      const l = lineAt(text, end);
      if (!l.blank) {
        if (l.indent === 0 && !(seqIndent === 0 && l.item)) break;
        if (l.indent < seqIndent || (l.indent === seqIndent && !l.item)) return undefined;
        if (l.indent === seqIndent) {
          if (cuts.at(-1)!.items > 0 && l.start - cuts.at(-1)!.start >= sliceBytes)
            cuts.push({ start: l.start, items: 0 });
          cuts.at(-1)!.items++;
        }
      }
      end = l.end;
    }
    at = end;
    if (cuts.length === 1) continue; // a short sequence stays in the run
    runHasContent = runBefore;
    closeRun(line.start);
    for (const [i, cut] of cuts.entries()) {
      const kind = i === 0 ? 'head' : 'items';
      slices.push({ kind, start: cut.start, end: cuts[i + 1]?.start ?? end, items: cut.items });
    }
    runStart = end;
    runHasContent = false;
  }
  closeRun(text.length);
  return slices.length > 1 ? slices : undefined;
}
