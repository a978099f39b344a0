import { presenceShardOf } from '../../core/presence';

/** The first `count` device ids `<prefix>-<i>` that fall in presence shard `shard`, in order. */
export function devicesOfShard(shard: number, count: number, prefix: string): string[] {
  const ids: string[] = [];
  for (let i = 0; ids.length < count; i++) if (presenceShardOf(`${prefix}-${i}`) === shard) ids.push(`${prefix}-${i}`);
  return ids;
}
