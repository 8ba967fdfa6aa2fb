/*
 * errors.h: MongoDB's error codes, kept in one table, and the error value
 * that every fallible function in Sable fills in.
 *
 * Convention (used everywhere): a fallible function returns int, 0 on
 * success or the MongoDB error code on failure, and fills the caller's
 * sbl_err_t with the code and a human message.  Only the command dispatcher
 * turns an sbl_err_t into a reply ({ok: 0, errmsg, code, codeName}).
 */
#ifndef SBL_ERRORS_H
#define SBL_ERRORS_H

#include <stdarg.h>
#include <stddef.h>

/* X(name, code): names are MongoDB's codeName values, each code as MongoDB 7.0's
 * src/mongo/base/error_codes.yml numbers it (64 is WriteConcernFailed there; 8.x renamed
 * it WriteConcernTimeout).  Location<code> entries are assertion codes the file does not
 * name.  tests/unit/test_errors.c pins the entries once numbered wrongly here. */
#define SBL_ERROR_CODES(X)                                                                         \
    X(OK, 0)                                                                                       \
    X(InternalError, 1)                                                                            \
    X(BadValue, 2)                                                                                 \
    X(NoSuchKey, 4)                                                                                \
    X(GraphContainsCycle, 5)                                                                       \
    X(HostUnreachable, 6)                                                                          \
    X(HostNotFound, 7)                                                                             \
    X(UnknownError, 8)                                                                             \
    X(FailedToParse, 9)                                                                            \
    X(CannotMutateObject, 10)                                                                      \
    X(UserNotFound, 11)                                                                            \
    X(UnsupportedFormat, 12)                                                                       \
    X(Unauthorized, 13)                                                                            \
    X(TypeMismatch, 14)                                                                            \
    X(Overflow, 15)                                                                                \
    X(InvalidLength, 16)                                                                           \
    X(ProtocolError, 17)                                                                           \
    X(AuthenticationFailed, 18)                                                                    \
    X(IllegalOperation, 20)                                                                        \
    X(NamespaceNotFound, 26)                                                                       \
    X(IndexNotFound, 27)                                                                           \
    X(PathNotViable, 28)                                                                           \
    X(NonExistentPath, 29)                                                                         \
    X(InvalidPath, 30)                                                                             \
    X(RoleNotFound, 31)                                                                            \
    X(ConflictingUpdateOperators, 40)                                                              \
    X(CursorNotFound, 43)                                                                          \
    X(NamespaceExists, 48)                                                                         \
    X(JSInterpreterFailure, 139)                                                                   \
    X(MaxTimeMSExpired, 50)                                                                        \
    X(ExceededTimeLimit, 262)                                                                      \
    X(DollarPrefixedFieldName, 52)                                                                 \
    X(InvalidIdField, 53)                                                                          \
    X(NotSingleValueField, 54)                                                                     \
    X(InvalidDBRef, 55)                                                                            \
    X(EmptyFieldName, 56)                                                                          \
    X(DottedFieldName, 57)                                                                         \
    X(CommandNotFound, 59)                                                                         \
    X(ImmutableField, 66)                                                                          \
    X(CannotCreateIndex, 67)                                                                       \
    X(IndexAlreadyExists, 68)                                                                      \
    X(InvalidOptions, 72)                                                                          \
    X(InvalidNamespace, 73)                                                                        \
    X(IndexOptionsConflict, 85)                                                                    \
    X(IndexKeySpecsConflict, 86)                                                                   \
    X(CannotIndexParallelArrays, 171)                                                          \
    X(QueryPlanKilled, 175)                                                                    \
    X(CappedPositionLost, 136)                                                                 \
    X(InvalidIndexSpecificationOption, 197)                                                    \
    X(OperationNotSupportedInTransaction, 263)                                                 \
    X(FailPointSetFailed, 266)                                                                 \
    X(PreparedTransactionInProgress, 267)                                                      \
    X(CannotConvertIndexToUnique, 359)                                                         \
    X(ViewDepthLimitExceeded, 165)                                                             \
    X(CommandNotSupportedOnView, 166)                                                          \
    X(OptionNotSupportedOnView, 167)                                                           \
    X(NotAReplicaSet, 123)                                                                     \
    X(IndexBuildAborted, 276)                                                                  \
    X(NoQueryExecutionPlans, 291)                                                              \
    X(TransactionExceededLifetimeLimitSeconds, 290)                                            \
    X(NetworkTimeout, 89)                                                                          \
    X(OperationFailed, 96)                                                                         \
    X(WriteConflict, 112)                                                                          \
    X(CommandNotSupported, 115)                                                                    \
    X(DocumentValidationFailure, 121)                                                              \
    X(CursorKilled, 237)                                                                           \
    X(NotImplemented, 238)                                                                         \
    X(MechanismUnavailable, 334)                                                                   \
    X(InvalidUUID, 207)                                                                            \
    X(NoSuchTransaction, 251)                                                                      \
    X(TransactionTooOld, 225)                                                                      \
    X(TransactionTooLarge, 257)                                                                    \
    X(TransactionCommitted, 256)                                                                   \
    X(ConflictingOperationInProgress, 117)                                                         \
    X(IncompleteTransactionHistory, 217)                                                           \
    X(NotARetryableWriteCommand, 50768)                                                            \
    X(Interrupted, 11601)                                                                          \
    X(InterruptedAtShutdown, 11600)                                                                \
    X(DuplicateKey, 11000)                                                                         \
    X(ExceededMemoryLimit, 146)                                                                    \
    X(OutOfDiskSpace, 14031)                                                                       \
    X(CursorInUse, 143)                                                                            \
    X(QueryExceededMemoryLimitNoDiskUseAllowed, 292)                                               \
    X(InvalidBSON, 22)                                                                             \
    X(BSONObjectTooLarge, 10334)                                                                   \
    X(TooManyFilesOpen, 264)                                                                       \
    X(OrphanedRangeCleanUpFailed, 265)                                                             \
    X(InvalidResumeToken, 260)                                                                     \
    X(ChangeStreamFatalError, 280)                                                                 \
    X(CollectionUUIDMismatch, 361)                                                                 \
    X(ChangeStreamHistoryLost, 286)                                                                \
    X(ConversionFailure, 241)                                                                      \
    X(SnapshotTooOld, 239)                                                                         \
    X(SnapshotUnavailable, 246)                                                                    \
    X(StaleChunkHistory, 250)                                                                      \
    X(KeyNotFound, 211)                                                                            \
    X(ShardingStateNotInitialized, 203)                                                            \
    X(TimeProofMismatch, 204)                                                                      \
    X(UnsatisfiableWriteConcern, 100)                                                              \
    X(UnknownReplWriteConcern, 79)                                                                 \
    X(NoMatchingDocument, 47)                                                                      \
    X(ShutdownInProgress, 91)                                                                      \
    X(NotWritablePrimary, 10107)                                                                   \
    X(AlreadyInitialized, 23)                                                                      \
    X(NodeNotFound, 74)                                                                            \
    X(NoReplicationEnabled, 76)                                                                    \
    X(InvalidReplicaSetConfig, 93)                                                                 \
    X(NotYetInitialized, 94)                                                                       \
    X(NotPrimaryOrSecondary, 13436)                                                                \
    X(NotPrimaryNoSecondaryOk, 13435)                                                              \
    X(InterruptedDueToReplStateChange, 11602)                                                      \
    X(WriteConcernFailed, 64)                                                                      \
    X(PrimarySteppedDown, 189)                                                                     \
    X(NotSecondary, 95)                                                                            \
    X(NodeNotElectable, 104)                                                                       \
    X(ShardKeyNotFound, 61)                                                                        \
    X(WouldChangeOwningShard, 283)                                                                 \
    X(ShardNotFound, 70)                                                                           \
    X(NamespaceNotSharded, 118)                                                                    \
    X(CannotSplit, 87)                                                                             \
    X(ChunkTooBig, 153)                                                                            \
    X(ZoneStillInUse, 163)                                                                         \
    X(ZoneNotFound, 177)                                                                           \
    X(RangeOverlapConflict, 178)                                                                   \
    X(StaleConfig, 13388)                                                                          \
    X(StaleDbVersion, 249)                                                                         \
    X(CommandFailed, 125)                                                                          \
    X(OplogStartMissing, 120)                                                                      \
    X(UnrecoverableRollbackError, 127)                                                             \
    X(NewReplicaSetConfigurationIncompatible, 103)                                                 \
    X(Location16436, 16436)                                                                        \
    X(Location31254, 31254)                                                                        \
    X(Location40352, 40352)                                                                        \
    X(Location15998, 15998)                                                                        \
    X(Location51024, 51024)                                                                        \
    X(Location17276, 17276)

enum {
#define SBL_ERR_ENUM(name, code) SBL_E_##name = code,
    SBL_ERROR_CODES(SBL_ERR_ENUM)
#undef SBL_ERR_ENUM
};

#define SBL_ERRMSG_MAX 512

typedef struct sbl_err {
    int code;                  /* MongoDB error code; 0 when no error */
    char msg[SBL_ERRMSG_MAX];  /* human readable, becomes errmsg */
} sbl_err_t;

/* The codeName for a code ("BadValue"); "Location<code>" for codes without a name (the
 * string then lives in thread-local storage until the next such call on this thread). */
const char *sbl_err_name(int code);

/* Fill *err (if not NULL) with code and a printf-style message; returns code. */
int sbl_err_set(sbl_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reset *err to "no error". */
void sbl_err_clear(sbl_err_t *err);

/* Evaluate x (an int-returning call); return its code from the caller on failure. */
#define SBL_RET(x)                                                                                 \
    do {                                                                                           \
        int sbl_ret_rc_ = (x);                                                                     \
        if (sbl_ret_rc_ != 0)                                                                      \
            return sbl_ret_rc_;                                                                    \
    } while (0)

/* Evaluate x, store its code in the local `rc`, jump to the local `err:` label on failure. */
#define SBL_ERR(x)                                                                                 \
    do {                                                                                           \
        if ((rc = (x)) != 0)                                                                       \
            goto err;                                                                              \
    } while (0)

#endif
