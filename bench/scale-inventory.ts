/**
 * The generated fleet of the scale benchmarks (`plan-scale.ts`, `start-scale.ts`): 20 pools `pool-a`…`pool-t`
 * (the demo rollout's pool-a and pool-b among them), four classes, three OSes, every tenth device
 * best-effort; flat `key: value` devices with `user` and `runtimes` in `defaults` (9.8 MB of YAML at 100,000).
 */
const POOLS = Array.from({ length: 20 }, (_, p) => `pool-${String.fromCharCode(97 + p)}`);
const CLASSES = ['server', 'desktop', 'kiosk', 'gateway'];
const OSES = ['ubuntu-22.04', 'debian-12', 'rhel-9'];

/** An inventory document of `n` devices; its pools include the demo rollout's pool-a and pool-b. */
export function scaleInventory(n: number) {
  return {
    pools: Object.fromEntries(POOLS.map((pool) => [pool, { disruptionBudget: 0.05 }])),
    defaults: { user: 'wavegate', runtimes: ['motd'] },
    devices: Array.from({ length: n }, (_, i) => ({
      id: `dev-${String(i).padStart(6, '0')}`,
      host: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
      pool: POOLS[i % POOLS.length]!,
      class: CLASSES[i % CLASSES.length]!,
      os: OSES[i % OSES.length]!,
      ...(i % 10 === 7 ? { updateClass: 'best-effort' } : {}),
    })),
  };
}
