import type * as Zod from 'zod';

/**
 * Schemas built on their first use, and zod itself loaded then, rather than when their modules load.
 *
 * Why: the worker runs workflows in a reusable V8 context that evaluates the workflow bundle's modules once for
 * EVERY cached workflow execution, so zod and every schema built at module load are built again for each one.
 * Workflow code imports the schema modules (the registry workflow validates signed content), so every cached
 * device twin carried zod and all of them: 2.5 MB of worker memory a twin (bench/twin-memory.ts, bench/README.md).
 * Built lazily, zod and a schema cost only the executions (and processes) that validate with them.
 */

let loaded: typeof Zod.z | undefined;

/** zod's `z`, loaded on first use (schema modules import zod's types only, and call this where they build). */
export function zod(): typeof Zod.z {
  loaded ??= (require('zod') as typeof Zod).z;
  return loaded;
}

/**
 * A schema (or any object) built by `build` on its first use. The stand-in forwards every property read, write
 * and `in` to the schema, and its prototype is the schema's, so parse, safeParse, composition into other schemas
 * and zod's own `instanceof` checks see the schema itself.
 */
export function lazySchema<T extends object>(build: () => T): T {
  let built: T | undefined;
  const schema = (): T => {
    built ??= build();
    return built;
  };
  return new Proxy({} as T, {
    get: (_stand, key) => Reflect.get(schema(), key),
    set: (_stand, key, value) => Reflect.set(schema(), key, value),
    has: (_stand, key) => Reflect.has(schema(), key),
    getPrototypeOf: () => Reflect.getPrototypeOf(schema()),
  });
}
