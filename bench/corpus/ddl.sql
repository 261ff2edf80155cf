-- Schema changes as migrations send them.

CREATE TABLE IF NOT EXISTS public.accounts (id bigserial PRIMARY KEY, tenant_id bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE, email text NOT NULL, balance numeric(12, 2) NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now(), CONSTRAINT accounts_email_key UNIQUE (tenant_id, email), CHECK (balance >= 0))

ALTER TABLE accounts ADD COLUMN last_login timestamptz, ALTER COLUMN email SET NOT NULL

CREATE INDEX CONCURRENTLY IF NOT EXISTS accounts_tenant_created_idx ON accounts USING btree (tenant_id, created_at DESC) WHERE balance > 0

CREATE OR REPLACE VIEW active_accounts AS SELECT a.id, a.email, t.name AS tenant FROM accounts a JOIN tenants t ON t.id = a.tenant_id WHERE a.last_login > now() - interval '30 days'

DROP TABLE IF EXISTS old_accounts, old_sessions CASCADE

GRANT SELECT, INSERT, UPDATE ON accounts, tenants TO app_rw

COMMENT ON COLUMN accounts.balance IS 'Current balance in the tenant''s currency'

CREATE OR REPLACE FUNCTION touch_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.updated_at := now(); RETURN NEW; END $$

CREATE TRIGGER accounts_touch BEFORE UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION touch_updated_at()

CREATE TEMP TABLE import_staging (LIKE accounts INCLUDING DEFAULTS) ON COMMIT DROP
