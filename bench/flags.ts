/** A benchmark's numeric flag: a whole number from `min` to `max`, or an error naming the flag and the value. */
export function wholeFlag(name: string, value: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new Error(
      `--${name}: expected a whole number ${max === Number.MAX_SAFE_INTEGER ? `of at least ${min}` : `from ${min} to ${max}`}, got ${JSON.stringify(value)}`,
    );
  }
  return n;
}
