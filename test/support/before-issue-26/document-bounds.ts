/**
 * core/document-bounds.ts as it was at 00a78b0, before issue 26 made it faster: the oracle the current one is
 * compared with (test/unit/core/before-issue-26.test.ts). Never edit it to follow a change: whatever the
 * input, the current one must give what this one gives (a plan that differs stops recorded histories replaying).
 */
/**
 * The shape every user document must keep before any schema looks at it: nested at most
 * MAX_DOCUMENT_DEPTH levels (no wavegate format needs more than a handful; a 100,000-level document
 * would overflow the stack of whatever walks it next), and no `__proto__` key anywhere (a record would
 * silently drop it, or an assignment would replace an object's prototype).
 */
export const MAX_DOCUMENT_DEPTH = 64;

export interface ShapeProblem {
  /** Where: for a too-deep document, the first levels of the too-deep branch (`deep` is then true). */
  path: PropertyKey[];
  deep: boolean;
  value: unknown;
  message: string;
}

/** Problems with the document's shape, found by an iterative walk (no recursion: the depth is the input's). */
export function documentProblems(data: unknown, maxDepth = MAX_DOCUMENT_DEPTH): ShapeProblem[] {
  const problems: ShapeProblem[] = [];
  const stack: Array<{ value: unknown; path: PropertyKey[] }> = [{ value: data, path: [] }];
  while (stack.length && problems.length < 10) {
    const { value, path } = stack.pop()!;
    if (value === null || typeof value !== 'object') continue;
    if (path.length >= maxDepth) {
      // Name where it starts going deep (a few levels of it), not all 64 levels.
      problems.push({
        path: path.slice(0, 6),
        deep: true,
        value: undefined,
        message: `nested more than ${maxDepth} levels deep; no wavegate document needs that`,
      });
      continue;
    }
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], path: [...path, i] });
      continue;
    }
    for (const key of Object.keys(value)) {
      if (key === '__proto__') {
        problems.push({
          path: [...path, key],
          deep: false,
          value: key,
          message: 'is a reserved name (a property of every JavaScript object); choose another name',
        });
        continue;
      }
      stack.push({ value: (value as Record<string, unknown>)[key], path: [...path, key] });
    }
  }
  return problems;
}
