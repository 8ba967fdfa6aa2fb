/*
 * test_errors.c: the error table (src/common/errors.h) answers MongoDB's
 * code and codeName for the entries once numbered wrongly here (MongoDB's
 * src/mongo/base/error_codes.yml: 87 CannotSplit, 95 NotSecondary, 104
 * NodeNotElectable, 165 ViewDepthLimitExceeded, 203 ShardingStateNotInitialized, 204 TimeProofMismatch,
 * 50768 NotARetryableWriteCommand), and the numbers they wrongly held, each
 * another MongoDB error Sable does not raise, read as Location<code>.
 */
#include "check.h"
#include "common/errors.h"

#include <string.h>

static void check_code(int code, int want, const char *name)
{
    CHECK_MSG(code == want, "%s is %d, MongoDB's is %d", name, code, want);
    CHECK_MSG(strcmp(sbl_err_name(want), name) == 0, "%d names %s, want %s", want,
              sbl_err_name(want), name);
}

int main(void)
{
    check_code(SBL_E_CannotSplit, 87, "CannotSplit");
    check_code(SBL_E_NotSecondary, 95, "NotSecondary");
    check_code(SBL_E_NodeNotElectable, 104, "NodeNotElectable");
    check_code(SBL_E_ViewDepthLimitExceeded, 165, "ViewDepthLimitExceeded");
    check_code(SBL_E_ShardingStateNotInitialized, 203, "ShardingStateNotInitialized");
    check_code(SBL_E_TimeProofMismatch, 204, "TimeProofMismatch");
    check_code(SBL_E_NotARetryableWriteCommand, 50768, "NotARetryableWriteCommand");
    /* unchanged neighbours */
    check_code(SBL_E_IndexKeySpecsConflict, 86, "IndexKeySpecsConflict");
    check_code(SBL_E_NetworkTimeout, 89, "NetworkTimeout");
    check_code(SBL_E_WriteConcernFailed, 64, "WriteConcernFailed");
    /* MongoDB's 106 DistributedClockSkewed, 135 StaleTerm, 147 ZLibError, 149
     * NoConfigPrimary, 293 InvalidSeedList: not in Sable's table */
    CHECK(strcmp(sbl_err_name(106), "Location106") == 0);
    CHECK(strcmp(sbl_err_name(135), "Location135") == 0);
    CHECK(strcmp(sbl_err_name(147), "Location147") == 0);
    CHECK(strcmp(sbl_err_name(149), "Location149") == 0);
    CHECK(strcmp(sbl_err_name(293), "Location293") == 0);
    return CHECK_DONE("errors");
}
