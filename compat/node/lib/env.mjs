// Connection settings from compat/run: COMPAT_URL is PostgreSQL directly or pgvia.
export const env = {
  url: required('COMPAT_URL'),
  stressSeconds: Number(process.env.COMPAT_STRESS_SECONDS || 10),
  stressClients: Number(process.env.COMPAT_STRESS_CLIENTS || 50),
}

function required(name) {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is not set: run the suite through compat/run`)
  return v
}

export function freshTableSql(name, columns) {
  return `DROP TABLE IF EXISTS ${name}; CREATE TABLE ${name} (${columns})`
}

// A small seeded generator, so a failing stress run can be replayed.
export function randomFor(seed) {
  let s = (seed + 1) * 2654435761
  return () => {
    s = (s * 1103515245 + 12345) % 2147483648
    return s / 2147483648
  }
}
