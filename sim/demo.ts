import type { SimDeviceSpec } from './device';

/**
 * Default 12 devices "edge-01".."edge-12": pools alternate pool-a / pool-b, two thirds "server"
 * (8 of 12) and one third "desktop" (every third device), os "linux", updateClass "required",
 * labels { site: site-1 (first half) | site-2, role: <class> }.
 */
export function demoDevices(n = 12): SimDeviceSpec[] {
  const width = Math.max(2, String(n).length);
  const out: SimDeviceSpec[] = [];
  for (let i = 1; i <= n; i++) {
    const cls = i % 3 === 0 ? 'desktop' : 'server';
    const pool = i % 2 === 1 ? 'pool-a' : 'pool-b';
    const spec: SimDeviceSpec = {
      id: `edge-${String(i).padStart(width, '0')}`,
      pool,
      class: cls,
      os: 'linux',
      labels: { site: i <= Math.ceil(n / 2) ? 'site-1' : 'site-2', role: cls },
      updateClass: 'required',
    };
    out.push(spec);
  }
  return out;
}
