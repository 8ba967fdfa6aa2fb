/*
 * YcsbConnectionTest: YcsbBindingTest's phases about connecting: the
 * driver's connection handshake replayed over legacy OP_QUERY on a raw
 * socket, commands through the driver (isMaster, buildinfo, getlasterror,
 * ping), and the options a YCSB user puts in mongodb.url: w=0 (each
 * unacknowledged call returns and its effect appears), journal=true and
 * compressors=zlib.
 */

import com.mongodb.WriteConcern;
import com.mongodb.client.result.DeleteResult;
import com.mongodb.client.result.UpdateResult;

import org.bson.BsonDocument;
import org.bson.BsonValue;
import org.bson.Document;
import org.bson.RawBsonDocument;
import org.bson.codecs.DocumentCodec;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;

final class YcsbConnectionTest extends YcsbSupport {

    // ------------------------------------------------------------------
    // raw legacy OP_QUERY: the driver's connection handshake
    // ------------------------------------------------------------------

    static final DocumentCodec CODEC = new DocumentCodec();

    static final class Reply {
        int opCode;
        int responseTo;
        int flags;
        long cursorId;
        int numberReturned;
        BsonDocument doc;
    }

    static Reply opQuery(Socket s, int requestId, String ns, Document cmd) throws IOException {
        RawBsonDocument raw = new RawBsonDocument(cmd, CODEC);
        ByteBuffer body = raw.getByteBuffer().asNIO();
        byte[] docBytes = new byte[body.remaining()];
        body.get(docBytes);
        byte[] nsBytes = ns.getBytes(StandardCharsets.UTF_8);
        int len = 16 + 4 + nsBytes.length + 1 + 4 + 4 + docBytes.length;
        ByteBuffer b = ByteBuffer.allocate(len).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(len).putInt(requestId).putInt(0).putInt(2004);
        b.putInt(0); // flags
        b.put(nsBytes).put((byte) 0);
        b.putInt(0); // numberToSkip
        b.putInt(-1); // numberToReturn
        b.put(docBytes);
        OutputStream out = s.getOutputStream();
        out.write(b.array());
        out.flush();

        DataInputStream in = new DataInputStream(s.getInputStream());
        byte[] hdr = new byte[16];
        in.readFully(hdr);
        ByteBuffer h = ByteBuffer.wrap(hdr).order(ByteOrder.LITTLE_ENDIAN);
        int rlen = h.getInt();
        h.getInt();
        Reply r = new Reply();
        r.responseTo = h.getInt();
        r.opCode = h.getInt();
        if (rlen < 16 || rlen > 48 * 1024 * 1024) {
            throw new IOException("bad reply length " + rlen);
        }
        byte[] rest = new byte[rlen - 16];
        in.readFully(rest);
        ByteBuffer rb = ByteBuffer.wrap(rest).order(ByteOrder.LITTLE_ENDIAN);
        if (r.opCode == 1) {
            r.flags = rb.getInt();
            r.cursorId = rb.getLong();
            rb.getInt(); // startingFrom
            r.numberReturned = rb.getInt();
            if (r.numberReturned >= 1) {
                byte[] d = new byte[rb.remaining()];
                rb.get(d);
                r.doc = new RawBsonDocument(d);
            }
        }
        return r;
    }

    static double okValue(BsonDocument d) {
        BsonValue v = d == null ? null : d.get("ok");
        return v != null && v.isNumber() ? v.asNumber().doubleValue() : -1;
    }

    /* setName: null for a standalone, else the set the (primary) member must name. */
    static void phaseRawHandshake(String host, int port, String setName) {
        startPhase("handshake over legacy OP_QUERY");
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 5000);
            s.setSoTimeout(10000);

            // 1. ismaster with client metadata, as InternalStreamConnectionInitializer sends it.
            Document client = new Document("driver",
                    new Document("name", "mongo-java-driver").append("version", "3.6.3"))
                    .append("os", new Document("type", "Linux").append("name", System.getProperty("os.name"))
                            .append("architecture", System.getProperty("os.arch"))
                            .append("version", System.getProperty("os.version")))
                    .append("platform", "Java/" + System.getProperty("java.vendor") + "/"
                            + System.getProperty("java.runtime.version"));
            Reply r = opQuery(s, 1, "admin.$cmd", new Document("ismaster", 1).append("client", client));
            check(r.opCode == 1, "ismaster reply opCode " + r.opCode + " (want OP_REPLY 1)");
            check(r.responseTo == 1, "ismaster reply responseTo " + r.responseTo);
            check(r.numberReturned == 1 && r.doc != null, "ismaster numberReturned " + r.numberReturned);
            BsonDocument d = r.doc;
            if (d != null) {
                check(okValue(d) == 1.0, "ismaster ok: " + d.toJson());
                check(d.containsKey("ismaster") && d.get("ismaster").isBoolean()
                        && d.getBoolean("ismaster").getValue(), "ismaster:true missing: " + d.toJson());
                BsonValue maxW = d.get("maxWireVersion");
                BsonValue minW = d.get("minWireVersion");
                check(maxW != null && maxW.isNumber() && maxW.asNumber().intValue() >= 6,
                        "maxWireVersion >= 6 (OP_MSG for driver 3.6): " + maxW);
                check(minW != null && minW.isNumber() && minW.asNumber().intValue() <= 6,
                        "minWireVersion <= 6 (driver 3.6 supports up to 6): " + minW);
                for (String f : new String[] {"maxBsonObjectSize", "maxMessageSizeBytes", "maxWriteBatchSize"}) {
                    check(d.containsKey(f) && d.get(f).isNumber() && d.get(f).asNumber().intValue() > 0,
                            "ismaster." + f + " = " + d.get(f));
                }
                if (setName == null) {
                    check(!d.containsKey("setName") && !d.containsKey("msg"),
                            "standalone: no setName/msg (else not a standalone to the driver): " + d.toJson());
                } else {
                    check(d.containsKey("setName") && new org.bson.BsonString(setName).equals(d.get("setName"))
                            && d.containsKey("hosts") && d.get("hosts").isArray(),
                            "replica-set primary: setName " + setName + " and hosts: " + d.toJson());
                }
                check(!d.containsKey("connectionId") || d.get("connectionId").isNumber(),
                        "connectionId numeric: " + d.get("connectionId"));
                System.out.println("   ismaster: connectionId=" + d.get("connectionId") + " wire=" + minW + ".." + maxW);
            }

            // 2. buildinfo: the driver takes its ServerVersion from versionArray.
            r = opQuery(s, 2, "admin.$cmd", new Document("buildinfo", 1));
            check(r.opCode == 1 && r.responseTo == 2 && r.doc != null, "buildinfo OP_REPLY");
            d = r.doc;
            if (d != null) {
                check(okValue(d) == 1.0, "buildinfo ok: " + d.toJson());
                check(d.containsKey("version") && d.get("version").isString(), "buildinfo.version: " + d.get("version"));
                BsonValue va = d.get("versionArray");
                boolean good = va != null && va.isArray() && va.asArray().size() >= 3;
                if (good) {
                    for (int i = 0; i < 3; i++) {
                        good &= va.asArray().get(i).isInt32();
                    }
                }
                check(good, "buildinfo.versionArray: >= 3 int32 (driver reads it): " + va);
                System.out.println("   buildinfo: version=" + d.get("version") + " versionArray=" + va);
            }

            // 3. getlasterror: the driver sends it when ismaster lacks connectionId.
            r = opQuery(s, 3, "admin.$cmd", new Document("getlasterror", 1));
            check(r.opCode == 1 && r.responseTo == 3 && r.doc != null, "getlasterror OP_REPLY");
            d = r.doc;
            if (d != null) {
                check(okValue(d) == 1.0, "getlasterror ok: " + d.toJson());
                check(d.containsKey("connectionId") && d.get("connectionId").isNumber(),
                        "getlasterror.connectionId numeric: " + d.toJson());
                check(d.containsKey("err") && d.get("err").isNull(), "getlasterror err:null: " + d.toJson());
            }

            // 4. the server monitor's periodic ismaster (no metadata), on the same socket.
            r = opQuery(s, 4, "admin.$cmd", new Document("ismaster", 1));
            check(r.opCode == 1 && r.responseTo == 4 && okValue(r.doc) == 1.0, "repeat ismaster ok");
        } catch (Throwable e) {
            threw("raw OP_QUERY handshake", e);
        }
        // compressors=zlib in the URL: the driver offers compression in its ismaster
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 5000);
            s.setSoTimeout(10000);
            Reply r = opQuery(s, 7, "admin.$cmd", new Document("ismaster", 1)
                    .append("client", new Document("driver", new Document("name", "mongo-java-driver")
                            .append("version", "3.6.3")))
                    .append("compression", Arrays.asList("zlib")));
            BsonValue c = r.doc == null ? null : r.doc.get("compression");
            check(okValue(r.doc) == 1.0 && c != null && c.isArray()
                    && c.asArray().contains(new org.bson.BsonString("zlib")),
                    "ismaster with compression:[zlib] answers compression:[zlib]: " + (r.doc == null ? null : r.doc.toJson()));
        } catch (Throwable e) {
            threw("raw OP_QUERY ismaster with compression", e);
        }
    }

    // ------------------------------------------------------------------
    // commands through the driver
    // ------------------------------------------------------------------

    static void phaseDriverCommands(Binding b) {
        startPhase("driver runCommand isMaster/buildinfo/...");
        try {
            Document d = b.database.runCommand(new Document("isMaster", 1));
            check(Boolean.TRUE.equals(d.get("ismaster")), "runCommand isMaster: " + d.toJson());
            check(d.get("maxWireVersion") instanceof Number, "isMaster maxWireVersion: " + d.toJson());
        } catch (Throwable e) {
            threw("runCommand(isMaster)", e);
        }
        try {
            Document d = b.database.runCommand(new Document("buildinfo", 1));
            check(d.get("version") instanceof String, "buildinfo.version: " + d.toJson());
            check(d.get("versionArray") instanceof List, "buildinfo.versionArray: " + d.toJson());
        } catch (Throwable e) {
            threw("runCommand(buildinfo)", e);
        }
        try {
            Document d = b.database.runCommand(new Document("getlasterror", 1));
            check(d.containsKey("err") && d.get("err") == null, "getlasterror err:null: " + d.toJson());
        } catch (Throwable e) {
            threw("runCommand(getlasterror)", e);
        }
        try {
            Document d = b.client.getDatabase("admin").runCommand(new Document("ping", 1));
            check(d.get("ok") instanceof Number && ((Number) d.get("ok")).doubleValue() == 1.0, "ping: " + d.toJson());
        } catch (Throwable e) {
            threw("runCommand(ping)", e);
        }
    }

    // ------------------------------------------------------------------
    // the URL's options: w=0, journal=true, compressors=zlib
    // ------------------------------------------------------------------

    /* Single-threaded w=0 smoke: each call returns, and the effects appear. */
    static void phaseUnackedSingle(String url, Binding ack, Random rnd) {
        startPhase("unacknowledged single ops (" + url.substring(url.lastIndexOf('/')) + ")");
        Binding b;
        try {
            b = new Binding(url);
            check(b.writeConcern.equals(WriteConcern.UNACKNOWLEDGED),
                    "URL w=0 is WriteConcern.UNACKNOWLEDGED: " + b.writeConcern);
        } catch (Throwable t) {
            threw("new MongoClient(" + url + ")", t);
            return;
        }
        String k1 = "user7900000001";
        String k2 = "user7900000002";
        Map<String, byte[]> v1 = values(rnd);
        Map<String, byte[]> v2 = values(rnd);
        Map<String, byte[]> set = someValues(rnd);
        try {
            b.insertOne(k1, v1);
            // the same connection is not guaranteed, so wait for the insert
            waitFor(ack, k1, v1, "unacknowledged insertOne");
            UpdateResult r = b.update(k1, set);
            check(!r.wasAcknowledged(), "w=0 updateOne: wasAcknowledged() false");
            v1 = merged(v1, set);
            waitFor(ack, k1, v1, "unacknowledged updateOne");
            r = b.upsert(k2, v2);
            check(!r.wasAcknowledged(), "w=0 replaceOne upsert: wasAcknowledged() false");
            waitFor(ack, k2, v2, "unacknowledged replaceOne upsert");
            DeleteResult dr = b.delete(k1);
            check(!dr.wasAcknowledged(), "w=0 deleteOne: wasAcknowledged() false");
            waitFor(ack, k1, null, "unacknowledged deleteOne");
            dr = b.delete(k2);
            waitFor(ack, k2, null, "unacknowledged deleteOne");
            // a duplicate insert with w=0 is silently dropped; the client must stay usable
            String s = STATIC.firstKey();
            b.insertOne(s, values(rnd));
            check(diff(b.read(s, null), s, STATIC.get(s), null) == null, "w=0 client reads after a failing w=0 insert");
            // a read through the w=0 client, and a getlasterror through it
            Document gle = b.database.runCommand(new Document("getlasterror", 1));
            check(gle.get("ok") instanceof Number, "getlasterror through w=0 client: " + gle.toJson());
        } catch (Throwable t) {
            threw("w=0 single ops", t);
        }
        try {
            b.close();
        } catch (Throwable t) {
            threw("MongoClient.close() (w=0)", t);
        }
    }

    static void waitFor(Binding ack, String key, Map<String, byte[]> v, String what) {
        long deadline = System.currentTimeMillis() + 5000;
        String d;
        while (true) {
            Document doc = ack.read(key, null);
            d = v == null ? (doc == null ? null : key + " still present") : diff(doc, key, v, null);
            if (d == null || System.currentTimeMillis() > deadline) {
                break;
            }
            sleep(20);
        }
        check(d == null, what + ": " + d);
    }

    /* A YCSB user may add compressors=zlib to mongodb.url. */
    static void phaseCompressed(String url, Random rnd) {
        startPhase("compressors=zlib");
        try {
            Binding b = new Binding(url);
            String key = "user7900000020";
            Map<String, byte[]> v = values(rnd);
            b.insertOne(key, v);
            Map<String, byte[]> set = someValues(rnd);
            check(b.update(key, set).getMatchedCount() == 1, "zlib updateOne matched 1");
            v = merged(v, set);
            check(diff(b.read(key, null), key, v, null) == null, "zlib read back");
            String start = STATIC.firstKey();
            checkScan("zlib scan", b.scan(start, 300, null), STATIC, start, 300, null);
            check(b.delete(key).getDeletedCount() == 1, "zlib deleteOne deleted 1");
            b.close();
        } catch (Throwable t) {
            threw("compressors=zlib ops", t);
        }
    }

    static void phaseJournal(String url, Random rnd) {
        startPhase("w=1&journal=true");
        try {
            Binding b = new Binding(url);
            check(Boolean.TRUE.equals(b.writeConcern.getJournal()), "journal=true parsed: " + b.writeConcern);
            String key = "user7900000010";
            Map<String, byte[]> v = values(rnd);
            b.insertOne(key, v);
            Map<String, byte[]> set = someValues(rnd);
            check(b.update(key, set).getMatchedCount() == 1, "j:true updateOne matched 1");
            check(diff(b.read(key, null), key, merged(v, set), null) == null, "j:true read back");
            check(b.delete(key).getDeletedCount() == 1, "j:true deleteOne deleted 1");
            b.close();
        } catch (Throwable t) {
            threw("journal=true ops", t);
        }
    }
}
