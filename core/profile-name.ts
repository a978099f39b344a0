import { WavegateError } from './errors';

/**
 * What a profile may be called. The name becomes a directory (`<profiles>/<name>/`), a workflow id
 * (`rollout:<name>`, `registry:<name>`) and a visibility-query literal, so it is kept to characters
 * that are safe in all three.
 */
export const PROFILE_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** The rule in words, for error messages. */
export const PROFILE_NAME_RULE = 'must be lowercase letters, digits and "-"';

/** `name` if it is a profile name, else INVALID_INPUT naming `field` and the value. */
export function checkProfileName(name: string, field = 'profile'): string {
  if (typeof name !== 'string' || !PROFILE_NAME.test(name)) {
    throw new WavegateError('INVALID_INPUT', `${field}: ${PROFILE_NAME_RULE} (got ${JSON.stringify(name)})`, {
      field,
      value: name,
    });
  }
  return name;
}
