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

/** A node met by the walk: its path is kept as a link to its parent, built only for a problem. */
interface Visit {
  value: unknown;
  parent: Visit | undefined;
  key: PropertyKey;
  depth: number;
}

function pathOf(visit: Visit): PropertyKey[] {
  const path: PropertyKey[] = [];
  for (let v: Visit | undefined = visit; v?.parent; v = v.parent) path.push(v.key);
  return path.reverse();
}

/**
 * Problems with the document's shape, found by an iterative walk (no recursion: the depth is the input's).
 * Paths are parent links, not a copied array per node: a 100,000-device inventory has a million nodes.
 */
export function documentProblems(data: unknown, maxDepth = MAX_DOCUMENT_DEPTH): ShapeProblem[] {
  const problems: ShapeProblem[] = [];
  const stack: Visit[] = [{ value: data, parent: undefined, key: '', depth: 0 }];
  while (stack.length && problems.length < 10) {
    const visit = stack.pop()!;
    const { value, depth } = visit;
    if (value === null || typeof value !== 'object') continue;
    if (depth >= maxDepth) {
      // Name where it starts going deep (a few levels of it), not all 64 levels.
      problems.push({
        path: pathOf(visit).slice(0, 6),
        deep: true,
        value: undefined,
        message: `nested more than ${maxDepth} levels deep; no wavegate document needs that`,
      });
      continue;
    }
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--)
        stack.push({ value: value[i], parent: visit, key: i, depth: depth + 1 });
      continue;
    }
    for (const key of Object.keys(value)) {
      if (key === '__proto__') {
        problems.push({
          path: [...pathOf(visit), key],
          deep: false,
          value: key,
          message: 'is a reserved name (a property of every JavaScript object); choose another name',
        });
        continue;
      }
      stack.push({ value: (value as Record<string, unknown>)[key], parent: visit, key, depth: depth + 1 });
    }
  }
  return problems;
}
