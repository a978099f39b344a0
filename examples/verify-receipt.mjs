#!/usr/bin/env node
// Check one device's receipt from a wavegate receipts bundle with nothing of wavegate: Node's own crypto and fs,
// and for an SSH device OpenSSH's `ssh-keygen -Y verify` (docs/formats.md, "Verifying a receipt without wavegate").
//
//   node verify-receipt.mjs <bundle-dir> <device-id> [<out-dir>]
//
// It takes the device's last receipt in the bundle's trail.jsonl and its enrolled key in enrolment.json, then:
// - checks the receipt's own lines: its device, its key line naming the enrolled key, its nonce (recomputed from
//   the record's rollout and run and the entry's request);
// - agent: verifies the Ed25519 signature over the signed text with the enrolled key (exit 0 good, 1 bad);
// - ssh: writes <out-dir>/receipt.txt (the signed text), receipt.sig (the signature, re-armored) and
//   allowed_signers, and prints the `ssh-keygen -Y verify` command that checks them (exit 0: now run it).
import { createHash, createPublicKey, verify } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';

const [bundle, device, outDir = '.'] = process.argv.slice(2);
if (!bundle || !device) {
  console.error('usage: node verify-receipt.mjs <bundle-dir> <device-id> [<out-dir>]');
  process.exit(2);
}
const fail = (why) => {
  console.log(`${device}: BAD: ${why}`);
  process.exit(1);
};

// The device's last entry with a receipt, and the record it came with.
let found;
for (const line of readFileSync(`${bundle}/trail.jsonl`, 'utf8').split('\n')) {
  if (!line) continue;
  const record = JSON.parse(line);
  if (record.event !== 'devices.outcome') continue;
  for (const entry of record.evidence?.devices ?? [])
    if (entry.id === device && typeof entry.receipt === 'string') found = { record, entry };
}
if (!found) fail('no receipt of this device in trail.jsonl');
const enrolled = JSON.parse(readFileSync(`${bundle}/enrolment.json`, 'utf8')).devices.find((d) => d.id === device);
if (!enrolled) fail('not enrolled in enrolment.json');

// The receipt: the signed text (every line before the last), then `sig <base64>`.
const text = found.entry.receipt;
const at = text.lastIndexOf('sig ');
const body = text.slice(0, at);
const sig = text.slice(at + 4).trim();
const fields = Object.fromEntries(
  body
    .split('\n')
    .slice(1, -1)
    .map((l) => [l.slice(0, l.indexOf(' ')), l.slice(l.indexOf(' ') + 1)]),
);
if (!body.startsWith('wavegate-receipt-v1\n')) fail('the first line is not wavegate-receipt-v1');
if (fields.device !== device) fail(`the receipt is device ${fields.device}'s`);
const sha256 = (data) => createHash('sha256').update(data).digest();
const nonce = sha256(
  `wavegate-receipt-nonce-v1\n${found.record.rolloutId}\n${found.record.runId}\n${found.entry.request}\n${device}`,
)
  .toString('hex')
  .slice(0, 32);
if (fields.nonce !== nonce) fail(`nonce ${fields.nonce} is not the request's ${nonce}`);

const [kind, keyId] = fields.key.split(' ');
if (kind !== enrolled.kind) fail(`signed by an ${kind} key, enrolled ${enrolled.kind}`);
if (kind === 'agent') {
  // agentKey `ed25519:<base64 of the 32-byte key>`; the key line names sha256/<base64url of its SHA-256>.
  const raw = Buffer.from(enrolled.key.slice('ed25519:'.length), 'base64');
  if (keyId !== `sha256/${sha256(raw).toString('base64url')}`) fail(`key ${keyId} is not the enrolled key`);
  const spki = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), raw]);
  const key = createPublicKey({ key: spki, format: 'der', type: 'spki' });
  if (!verify(null, Buffer.from(body), key, Buffer.from(sig, 'base64'))) fail('the Ed25519 signature does not verify');
  console.log(`${device}: good agent receipt: counter ${fields.counter}, ${fields.result} ${fields.profile} r${fields.revision}`);
} else {
  // receipts.key `ssh-ed25519 AAAA…`; the key line names its OpenSSH fingerprint SHA256:<base64 of its SHA-256>.
  const wire = Buffer.from(enrolled.key.split(' ')[1], 'base64');
  if (keyId !== `SHA256:${sha256(wire).toString('base64').replace(/=+$/, '')}`)
    fail(`key ${keyId} is not the enrolled key`);
  mkdirSync(outDir, { recursive: true });
  writeFileSync(`${outDir}/receipt.txt`, body);
  const lines = sig.match(/.{1,70}/g).join('\n');
  writeFileSync(`${outDir}/receipt.sig`, `-----BEGIN SSH SIGNATURE-----\n${lines}\n-----END SSH SIGNATURE-----\n`);
  writeFileSync(`${outDir}/allowed_signers`, `${device} ${enrolled.key}\n`);
  console.log(`${device}: ssh receipt written; check it with:`);
  console.log(
    `ssh-keygen -Y verify -f ${outDir}/allowed_signers -I ${device} -n wavegate-receipt -s ${outDir}/receipt.sig < ${outDir}/receipt.txt`,
  );
}
