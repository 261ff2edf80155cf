package compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.StringReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.postgresql.PGConnection;
import org.postgresql.PGStatement;
import org.postgresql.copy.CopyManager;

/**
 * pgjdbc at its default settings (prepareThreshold=5, autocommit on) unless a test says otherwise.
 * Tests run in name order, so the run is the same every time (the stress test comes last).
 */
@TestMethodOrder(MethodOrderer.MethodName.class)
class PgjdbcTest {
    static final String HOST = env("COMPAT_HOST");
    static final String PORT = env("COMPAT_PORT");
    static final String DB = env("COMPAT_DB");
    static final String USER = env("COMPAT_USER");
    static final String PASSWORD = env("COMPAT_PASSWORD");

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalStateException(name + " is not set: run the suite through compat/run");
        }
        return v;
    }

    static Connection connect(Properties extra) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", USER);
        p.setProperty("password", PASSWORD);
        p.putAll(extra);
        return DriverManager.getConnection("jdbc:postgresql://" + HOST + ":" + PORT + "/" + DB, p);
    }

    static Connection connect() throws SQLException {
        return connect(new Properties());
    }

    static void freshTable(Connection c, String name, String columns) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute("DROP TABLE IF EXISTS " + name);
            s.execute("CREATE TABLE " + name + " (" + columns + ")");
        }
    }

    static long queryLong(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            assertTrue(rs.next());
            return rs.getLong(1);
        }
    }

    @Test
    void prepareThresholdCrossing() throws SQLException {
        try (Connection c = connect();
                PreparedStatement ps = c.prepareStatement("SELECT ?::int * 3, ?::text")) {
            PGStatement pg = ps.unwrap(PGStatement.class);
            assertEquals(5, pg.getPrepareThreshold(), "the suite tests pgjdbc's default");
            for (int i = 0; i < 20; i++) {
                ps.setInt(1, i);
                ps.setString(2, "v" + i);
                try (ResultSet rs = ps.executeQuery()) {
                    assertTrue(rs.next());
                    assertEquals(i * 3, rs.getInt(1));
                    assertEquals("v" + i, rs.getString(2));
                }
            }
            // Past the threshold pgjdbc runs the query as a named server statement (S_n).
            assertTrue(pg.isUseServerPrepare());
        }
    }

    @Test
    void namedStatementAfterError() throws SQLException {
        try (Connection c = connect();
                PreparedStatement ps = c.prepareStatement("SELECT 12 / ?::int")) {
            for (int i = 1; i <= 8; i++) {
                ps.setInt(1, i);
                try (ResultSet rs = ps.executeQuery()) {
                    assertTrue(rs.next());
                    assertEquals(12 / i, rs.getInt(1));
                }
            }
            ps.setInt(1, 0);
            SQLException e = assertThrows(SQLException.class, ps::executeQuery);
            assertEquals("22012", e.getSQLState());
            ps.setInt(1, 4);
            try (ResultSet rs = ps.executeQuery()) {
                assertTrue(rs.next());
                assertEquals(3, rs.getInt(1));
            }
        }
    }

    @Test
    void executeBatchOf1000Rows() throws SQLException {
        try (Connection c = connect()) {
            freshTable(c, "java_batch", "id int, label text");
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO java_batch VALUES (?, ?)")) {
                for (int round = 0; round < 2; round++) {
                    for (int i = 0; i < 1000; i++) {
                        ps.setInt(1, round * 1000 + i);
                        ps.setString(2, "label " + i);
                        ps.addBatch();
                    }
                    int[] counts = ps.executeBatch();
                    assertEquals(1000, counts.length);
                    for (int n : counts) {
                        assertEquals(1, n);
                    }
                }
            }
            assertEquals(2000, queryLong(c, "SELECT count(*) FROM java_batch"));
            assertEquals(1999L * 2000 / 2, queryLong(c, "SELECT sum(id) FROM java_batch"));
        }
    }

    @Test
    void executeBatchWithError() throws SQLException {
        try (Connection c = connect()) {
            freshTable(c, "java_batch_err", "id int PRIMARY KEY");
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO java_batch_err VALUES (?)")) {
                for (int i : new int[] {1, 2, 2, 3}) {
                    ps.setInt(1, i);
                    ps.addBatch();
                }
                assertThrows(java.sql.BatchUpdateException.class, ps::executeBatch);
            }
            // With autocommit on, pgjdbc runs a batch as one transaction: nothing stayed.
            assertEquals(0, queryLong(c, "SELECT count(*) FROM java_batch_err"));
        }
    }

    @Test
    void reWriteBatchedInserts() throws SQLException {
        Properties p = new Properties();
        p.setProperty("reWriteBatchedInserts", "true");
        try (Connection c = connect(p)) {
            freshTable(c, "java_rewrite", "id int, label text");
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO java_rewrite (id, label) VALUES (?, ?)")) {
                for (int round = 0; round < 3; round++) {
                    for (int i = 0; i < 1000; i++) {
                        ps.setInt(1, i);
                        ps.setString(2, "r" + round);
                        ps.addBatch();
                    }
                    int[] counts = ps.executeBatch();
                    assertEquals(1000, counts.length);
                }
            }
            assertEquals(3000, queryLong(c, "SELECT count(*) FROM java_rewrite"));
            assertEquals(3, queryLong(c, "SELECT count(DISTINCT label) FROM java_rewrite"));
        }
    }

    @Test
    void copyManagerInAndOut() throws Exception {
        try (Connection c = connect()) {
            freshTable(c, "java_copy", "id int, label text");
            StringBuilder in = new StringBuilder();
            for (int i = 0; i < 10000; i++) {
                in.append(i).append('\t').append("line ").append(i).append('\n');
            }
            CopyManager copy = c.unwrap(PGConnection.class).getCopyAPI();
            assertEquals(10000, copy.copyIn("COPY java_copy FROM STDIN", new StringReader(in.toString())));
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            assertEquals(10000, copy.copyOut("COPY (SELECT id, label FROM java_copy ORDER BY id) TO STDOUT", out));
            assertEquals(in.toString(), out.toString(StandardCharsets.UTF_8));
            SQLException e = assertThrows(SQLException.class,
                    () -> copy.copyIn("COPY java_copy FROM STDIN", new StringReader("1\tok\nnot a number\tbad\n")));
            assertEquals("22P02", e.getSQLState());
            assertEquals(10000, queryLong(c, "SELECT count(*) FROM java_copy"));
        }
    }

    @Test
    void setReadOnly() throws SQLException {
        try (Connection c = connect()) {
            freshTable(c, "java_ro", "n int");
            c.setAutoCommit(false);
            c.setReadOnly(true);
            try (Statement s = c.createStatement()) {
                try (ResultSet rs = s.executeQuery("SHOW transaction_read_only")) {
                    assertTrue(rs.next());
                    assertEquals("on", rs.getString(1));
                }
                SQLException e = assertThrows(SQLException.class, () -> s.executeUpdate("INSERT INTO java_ro VALUES (1)"));
                assertEquals("25006", e.getSQLState());
            }
            c.rollback();
            c.setReadOnly(false);
            try (Statement s = c.createStatement()) {
                assertEquals(1, s.executeUpdate("INSERT INTO java_ro VALUES (1)"));
            }
            c.commit();
            assertEquals(1, queryLong(c, "SELECT count(*) FROM java_ro"));
        }
    }

    @Test
    void autoCommitOffTransactions() throws SQLException {
        try (Connection c = connect()) {
            freshTable(c, "java_tx", "n int");
            c.setAutoCommit(false);
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO java_tx VALUES (?)")) {
                ps.setInt(1, 1);
                ps.executeUpdate();
                Savepoint sp = c.setSavepoint();
                ps.setInt(1, 2);
                ps.executeUpdate();
                c.rollback(sp);
                ps.setInt(1, 3);
                ps.executeUpdate();
                c.commit();
                ps.setInt(1, 4);
                ps.executeUpdate();
                c.rollback();
            }
            try (Statement s = c.createStatement()) {
                assertThrows(SQLException.class, () -> s.execute("SELECT 1 / 0"));
            }
            c.rollback();
            List<Integer> got = new ArrayList<>();
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT n FROM java_tx ORDER BY n")) {
                while (rs.next()) {
                    got.add(rs.getInt(1));
                }
            }
            c.commit();
            assertEquals(List.of(1, 3), got);
        }
    }

    @Test
    void statementCancel() throws Exception {
        ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
        try (Connection c = connect(); Statement s = c.createStatement()) {
            timer.schedule(() -> {
                try {
                    s.cancel();
                } catch (SQLException ignored) {
                    // the assertion below reports a cancel that did not happen
                }
            }, 500, TimeUnit.MILLISECONDS);
            long started = System.nanoTime();
            SQLException e = assertThrows(SQLException.class, () -> s.execute("SELECT pg_sleep(20)"));
            assertEquals("57014", e.getSQLState());
            assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(10));
            assertEquals(5, queryLong(c, "SELECT 5"));
        } finally {
            timer.shutdownNow();
        }
    }

    @Test
    void queryTimeout() throws SQLException {
        try (Connection c = connect(); Statement s = c.createStatement()) {
            s.setQueryTimeout(1);
            long started = System.nanoTime();
            SQLException e = assertThrows(SQLException.class, () -> s.execute("SELECT pg_sleep(20)"));
            assertEquals("57014", e.getSQLState());
            assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(10));
            s.setQueryTimeout(0);
            assertEquals(6, queryLong(c, "SELECT 6"));
        }
    }

    @Test
    void stress50ClientsPool3() throws Exception {
        int clients = Integer.parseInt(System.getenv().getOrDefault("COMPAT_STRESS_CLIENTS", "50"));
        long seconds = Long.parseLong(System.getenv().getOrDefault("COMPAT_STRESS_SECONDS", "10"));
        try (Connection c = connect()) {
            freshTable(c, "java_stress", "client int, n int");
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        List<String> failures = Collections.synchronizedList(new ArrayList<>());
        List<Thread> threads = new ArrayList<>();
        for (int cid = 0; cid < clients; cid++) {
            final int id = cid;
            Thread t = new Thread(() -> {
                try {
                    stressClient(id, deadline);
                } catch (Throwable e) {
                    failures.add("client " + id + ": " + e);
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join(TimeUnit.SECONDS.toMillis(seconds + 60));
            assertFalse(t.isAlive(), "a stress client hung");
        }
        assertEquals(List.of(), failures.subList(0, Math.min(3, failures.size())), failures.size() + " clients failed");
    }

    static void stressClient(int cid, long deadline) throws SQLException {
        Random rnd = new Random(cid);
        int inserted = 0;
        try (Connection c = connect();
                PreparedStatement dbl = c.prepareStatement("SELECT ?::int8 * 2");
                PreparedStatement series = c.prepareStatement("SELECT count(*), sum(g) FROM generate_series(1, ?::int) g");
                PreparedStatement insert = c.prepareStatement("INSERT INTO java_stress VALUES (?, ?)");
                PreparedStatement count = c.prepareStatement("SELECT count(*) FROM java_stress WHERE client = ?")) {
            while (System.nanoTime() < deadline) {
                switch (rnd.nextInt(4)) {
                    case 0 -> {
                        long v = rnd.nextInt(1_000_000);
                        dbl.setLong(1, v);
                        try (ResultSet rs = dbl.executeQuery()) {
                            assertTrue(rs.next());
                            assertEquals(v * 2, rs.getLong(1));
                        }
                    }
                    case 1 -> {
                        int n = 1 + rnd.nextInt(50);
                        series.setInt(1, n);
                        try (ResultSet rs = series.executeQuery()) {
                            assertTrue(rs.next());
                            assertEquals(n, rs.getLong(1));
                            assertEquals((long) n * (n + 1) / 2, rs.getLong(2));
                        }
                    }
                    case 2 -> {
                        c.setAutoCommit(false);
                        insert.setInt(1, cid);
                        insert.setInt(2, inserted);
                        insert.executeUpdate();
                        count.setInt(1, cid);
                        try (ResultSet rs = count.executeQuery()) {
                            assertTrue(rs.next());
                            assertEquals(inserted + 1, rs.getLong(1));
                        }
                        c.commit();
                        c.setAutoCommit(true);
                        inserted++;
                    }
                    default -> {
                        for (int i = 0; i < 5; i++) {
                            insert.setInt(1, -1 - cid);
                            insert.setInt(2, i);
                            insert.addBatch();
                        }
                        int[] counts = insert.executeBatch();
                        assertEquals(5, counts.length);
                    }
                }
            }
            count.setInt(1, cid);
            try (ResultSet rs = count.executeQuery()) {
                assertTrue(rs.next());
                assertEquals(inserted, rs.getLong(1));
            }
        }
    }
}
