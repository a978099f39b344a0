import { lookup as dnsLookup } from 'node:dns';
import type { LookupFunction } from 'node:net';
import { addressRefusal, hostNameAllowed, parseIp, type SecretPolicy } from '../core/secret-policy';

/** A host name's addresses, as the resolver gives them (node:dns lookup with `all`). */
export type ResolveHost = (host: string) => Promise<Array<{ address: string; family: number }>>;

export const systemResolve: ResolveHost = (host) =>
  new Promise((resolve, reject) =>
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses) => (err ? reject(err) : resolve(addresses))),
  );

/**
 * The lookup a connection that carries a worker's secret uses (a signed webhook, a metrics token): every
 * address of the host judged by the policy, the connection made to those only. Refusals are pushed to
 * `refusals` (for the worker's log) and the lookup fails with code EPOLICY.
 */
export function checkedLookup(resolveHost: ResolveHost, policy: SecretPolicy, refusals: string[]): LookupFunction {
  return ((hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    resolveHost(hostname).then(
      (addresses) => {
        const allowedByName = hostNameAllowed(hostname, policy);
        for (const a of addresses) {
          const ip = parseIp(a.address);
          const refused = !ip
            ? `${a.address} is not an address`
            : allowedByName
              ? undefined
              : addressRefusal(ip, policy);
          if (refused) refusals.push(`${hostname} resolved: ${refused}`);
        }
        if (refusals.length)
          return callback(Object.assign(new Error(`refused by the ${policy.use.secret} policy`), { code: 'EPOLICY' }));
        if (!addresses.length)
          return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }));
        // Exactly the addresses judged above: nothing is resolved again between the check and the connect.
        if (options.all) callback(null, addresses);
        else callback(null, addresses[0]!.address, addresses[0]!.family);
      },
      (err: unknown) => callback(err),
    );
  }) as unknown as LookupFunction;
}
