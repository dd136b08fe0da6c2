package db

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// MySQL and MariaDB server error numbers flashsale decides on
// (https://mariadb.com/kb/en/mariadb-error-codes/).
const (
	// About the row written: the value itself is wrong for the column.
	ErrNumBadNull          = 1048 // ER_BAD_NULL_ERROR
	ErrNumDupEntry         = 1062 // ER_DUP_ENTRY (handled as idempotency)
	ErrNumNoReferencedRow  = 1216 // ER_NO_REFERENCED_ROW
	ErrNumRowIsReferenced  = 1217 // ER_ROW_IS_REFERENCED
	ErrNumOutOfRange       = 1264 // ER_WARN_DATA_OUT_OF_RANGE
	ErrNumTruncatedValue   = 1292 // ER_TRUNCATED_WRONG_VALUE
	ErrNumIncorrectValue   = 1366 // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
	ErrNumDataTooLong      = 1406 // ER_DATA_TOO_LONG
	ErrNumRowIsReferenced2 = 1451 // ER_ROW_IS_REFERENCED_2
	ErrNumNoReferencedRow2 = 1452 // ER_NO_REFERENCED_ROW_2

	// About the store, never about one row (outages and misconfiguration).
	// Named so logs and tests can refer to them; Classify needs no list of
	// them, because whatever is not about the row is an outage.
	ErrNumDiskFull         = 1021 // ER_DISK_FULL
	ErrNumTooManyConns     = 1040 // ER_CON_COUNT_ERROR
	ErrNumBadField         = 1054 // ER_BAD_FIELD_ERROR (missing column)
	ErrNumTableFull        = 1114 // ER_RECORD_FILE_FULL
	ErrNumTableAccess      = 1142 // ER_TABLEACCESS_DENIED_ERROR
	ErrNumNoSuchTable      = 1146 // ER_NO_SUCH_TABLE
	ErrNumLockWaitTimeout  = 1205 // ER_LOCK_WAIT_TIMEOUT
	ErrNumDeadlock         = 1213 // ER_LOCK_DEADLOCK
	ErrNumReadOnly         = 1290 // ER_OPTION_PREVENTS_STATEMENT (--read-only)
	ErrNumCheckViolated    = 4025 // ER_CONSTRAINT_FAILED (MariaDB CHECK)
	ErrNumCheckViolatedSQL = 3819 // ER_CHECK_CONSTRAINT_VIOLATED (MySQL 8)
)

// Class is what a failed statement is about.
type Class int

const (
	// ClassNone means no error.
	ClassNone Class = iota
	// ClassRow means MySQL refused the values of the rows written. Only such an
	// error may fail an order, and only after the rows were tried one by
	// one and not all of them failed the same way.
	ClassRow
	// ClassOutage means anything else: the store refuses writes (read-only, disk
	// or table full, missing privilege, table or column, a CHECK the
	// schema should not have), the connection was lost or timed out, the
	// caller's deadline passed, or an error nobody classified. The work
	// waits and is retried; nothing is failed or released for it.
	ClassOutage
)

func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassRow:
		return "row"
	default:
		return "outage"
	}
}

// Classify says what err is about. Only the server's verdict on a value
// (data too long, bad value, foreign key, duplicate key) is about the row;
// every other error, known or not, is an outage of the store.
func Classify(err error) Class {
	if err == nil {
		return ClassNone
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return ClassOutage
	}
	switch me.Number {
	case ErrNumBadNull, ErrNumDupEntry, ErrNumNoReferencedRow, ErrNumRowIsReferenced, ErrNumOutOfRange,
		ErrNumTruncatedValue, ErrNumIncorrectValue, ErrNumDataTooLong, ErrNumRowIsReferenced2, ErrNumNoReferencedRow2:
		return ClassRow
	}
	return ClassOutage
}

// IsRowError reports an error about the values written, not the store.
func IsRowError(err error) bool { return Classify(err) == ClassRow }

// ErrorNumber is the server's error number of err, 0 when it has none.
func ErrorNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
