/**
 * Records keyed by user-chosen names (pools, labels, budgets) are plain objects, so `record[name]` for a
 * name such as `constructor` or `toString` reads the prototype's function instead of "absent": a NaN
 * budget, or a pool that passes the "no such pool" check. Such names are refused where they are given
 * (RESERVED_NAMES), and records are read through `ownValue` so an own entry is the only answer.
 */
export const RESERVED_NAMES: ReadonlySet<string> = new Set([
  '__proto__',
  'prototype',
  'constructor',
  'hasOwnProperty',
  'isPrototypeOf',
  'propertyIsEnumerable',
  'toLocaleString',
  'toString',
  'valueOf',
  '__defineGetter__',
  '__defineSetter__',
  '__lookupGetter__',
  '__lookupSetter__',
]);

export const RESERVED_NAME_RULE =
  'is a reserved name (a property of every JavaScript object, such as "constructor" or "__proto__"); choose another name';

export function isReservedName(name: string): boolean {
  return RESERVED_NAMES.has(name);
}

/** `record[key]` when the record itself holds `key`; undefined otherwise (never an inherited property). */
export function ownValue<V>(record: Readonly<Record<string, V>> | undefined, key: string): V | undefined {
  return record !== undefined && Object.hasOwn(record, key) ? record[key] : undefined;
}
