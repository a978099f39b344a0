import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';

/**
 * Every relative link in the README and docs/ leads somewhere: the file (or directory) exists, and a
 * `#anchor` names a heading of the target document, slugged the way GitHub renders it. The reference
 * moved out of the README into docs/ (issue 23), and a moved section breaks links silently otherwise.
 */

/** The documents checked: README.md, SECURITY.md and every docs/*.md. */
const DOCUMENTS = [
  'README.md',
  'SECURITY.md',
  ...readdirSync(join(PROJECT_ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The text outside fenced code blocks, with inline code spans blanked: links and headings live only there. */
function prose(markdown: string): string[] {
  let fenced = false;
  return markdown.split('\n').map((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return '';
    }
    return fenced ? '' : line;
  });
}

/** GitHub's heading anchor: lower case, punctuation dropped (links keep their text), each space a `-`. */
function slug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M} _-]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a document's headings get, duplicates numbered `-1`, `-2` as GitHub does. */
function anchors(path: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of prose(readFileSync(path, 'utf8'))) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = slug(heading);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

interface Link {
  from: string;
  line: number;
  target: string;
}

function relativeLinks(doc: string): Link[] {
  const out: Link[] = [];
  prose(readFileSync(join(PROJECT_ROOT, doc), 'utf8')).forEach((line, i) => {
    const text = line.replace(/`[^`]*`/g, '``');
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target!)) continue; // https:, mailto:, file:
      out.push({ from: doc, line: i + 1, target: target! });
    }
  });
  return out;
}

/** What is wrong with one link, or undefined when it leads somewhere. */
function problem(link: Link): string | undefined {
  const [path, anchor] = link.target.split('#', 2) as [string, string | undefined];
  const file = path
    ? resolve(PROJECT_ROOT, dirname(link.from), decodeURIComponent(path))
    : join(PROJECT_ROOT, link.from);
  if (!existsSync(file)) return `no file ${relative(PROJECT_ROOT, file)}`;
  if (anchor === undefined) return undefined;
  if (statSync(file).isDirectory() || !file.endsWith('.md'))
    return `an anchor into ${relative(PROJECT_ROOT, file)}, which is not a markdown file`;
  return anchors(file).has(anchor)
    ? undefined
    : `${relative(PROJECT_ROOT, file)} has no heading with anchor #${anchor}`;
}

describe('links in the README and docs/', () => {
  it('slugs headings as GitHub does', () => {
    expect(slug('Pull transport: gateway and agent')).toBe('pull-transport-gateway-and-agent');
    expect(slug('TLS / mTLS')).toBe('tls--mtls');
    expect(slug('14. Audit store in PostgreSQL')).toBe('14-audit-store-in-postgresql');
    expect(slug('`wavegate fleet status`')).toBe('wavegate-fleet-status');
    expect(slug('Ordering between profiles (`after`)')).toBe('ordering-between-profiles-after');
  });

  it('finds the links it checks, and would catch a broken one', () => {
    const links = DOCUMENTS.flatMap(relativeLinks);
    expect(links.length).toBeGreaterThan(50);
    expect(links.some((l) => l.from === 'README.md' && l.target.startsWith('docs/'))).toBe(true);
    expect(problem({ from: 'README.md', line: 0, target: 'docs/cli.md#no-such-heading' })).toMatch(
      /no heading with anchor #no-such-heading/,
    );
    expect(problem({ from: 'docs/cli.md', line: 0, target: 'nowhere.md' })).toMatch(/no file docs\/nowhere\.md/);
  });

  it.each(DOCUMENTS)('every relative link in %s points to an existing file and heading', (doc) => {
    const broken = relativeLinks(doc).flatMap((link) => {
      const why = problem(link);
      return why ? [`${link.from}:${link.line}: (${link.target}): ${why}`] : [];
    });
    expect(broken).toEqual([]);
  });
});
